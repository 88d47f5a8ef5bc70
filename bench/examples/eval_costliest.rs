//! Which actions cost `evaluate` the most (a diagnosis for SPEC §21.5's mean per decision): every
//! action of both conformance files, each timed over 200 evaluations (fastest of 3 rounds); the
//! 25 costliest are printed with their share of the mix's total, then the cost distribution.
//! `cd bench && cargo run --release --example eval_costliest`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use airlock_bench::{action_lines, cases_path, v2_cases_path};
use airlock_policy::action::ProposedAction;
use airlock_policy::{Ruleset, evaluate};

fn main() {
    let ruleset = Ruleset::shipped().expect("the shipped policy loads");
    let actions: Vec<(String, ProposedAction)> = [cases_path(), v2_cases_path()]
        .iter()
        .flat_map(|path| action_lines(path))
        .map(|json| {
            let action = ProposedAction::from_json(&json).expect("a conformance action parses");
            (json, action)
        })
        .collect();
    let mut costs: Vec<(Duration, Duration, usize)> = actions
        .iter()
        .enumerate()
        .map(|(i, (json, action))| {
            let time = |f: &dyn Fn()| {
                (0..3)
                    .map(|_| {
                        let t = Instant::now();
                        for _ in 0..200 {
                            f();
                        }
                        t.elapsed() / 200
                    })
                    .min()
                    .unwrap_or_default()
            };
            let eval = time(&|| {
                black_box(evaluate(black_box(action), &ruleset));
            });
            let parse = time(&|| {
                black_box(ProposedAction::from_json(black_box(json)).ok());
            });
            (eval, parse, i)
        })
        .collect();
    let value = (0..5)
        .map(|_| {
            let t = Instant::now();
            for (json, _) in &actions {
                black_box(serde_json::from_str::<serde_json::Value>(black_box(json)).ok());
            }
            t.elapsed() / actions.len() as u32
        })
        .min()
        .unwrap_or_default();
    println!("serde_json::Value over the same lines: {value:?} per line");
    let total: Duration = costs.iter().map(|c| c.0).sum();
    let total_parse: Duration = costs.iter().map(|c| c.1).sum();
    costs.sort_by_key(|c| std::cmp::Reverse(c.0));
    let n = costs.len() as u32;
    println!(
        "{n} actions: evaluate mean {:?}, median {:?}; from_json mean {:?}",
        total / n,
        costs[costs.len() / 2].0,
        total_parse / n
    );
    let mut running = Duration::ZERO;
    for (eval, parse, i) in costs.iter().take(25) {
        running += *eval;
        let (json, action) = &actions[*i];
        let args = action.arguments.iter().map(|(k, v)| {
            let v = v.to_string();
            format!("{k}={}", v.chars().take(70).collect::<String>())
        });
        println!(
            "{:>8.2?} {:>8.2?} cum {:>5.1}% {} {} [{} bytes] {}",
            eval,
            parse,
            100.0 * running.as_secs_f64() / total.as_secs_f64(),
            action.name,
            action.target.kind.as_str(),
            json.len(),
            args.collect::<Vec<_>>().join(" ")
        );
    }
    let buckets = [1u64, 2, 4, 8, 16, 32, 64, 1000];
    for w in buckets.windows(2) {
        let (lo, hi) = (Duration::from_micros(w[0]), Duration::from_micros(w[1]));
        let in_bucket: Vec<_> = costs.iter().filter(|c| c.0 >= lo && c.0 < hi).collect();
        let sum: Duration = in_bucket.iter().map(|c| c.0).sum();
        println!(
            "{:>3}..{:>4} us: {:>4} actions, {:>5.1}% of the total",
            w[0],
            w[1],
            in_bucket.len(),
            100.0 * sum.as_secs_f64() / total.as_secs_f64()
        );
    }
}
