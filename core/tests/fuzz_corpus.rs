//! Replays the committed cargo-fuzz seed corpora (`fuzz/corpus/<target>/`) through the very entry
//! points the fuzz targets call, so CI covers every seed and every crash regression input without
//! installing cargo-fuzz. A panic in an entry point fails the test and names the file.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus directory {} is missing: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("readable corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "corpus directory {} is empty",
        dir.display()
    );
    files
}

fn replay(target: &str, entry_point: fn(&[u8])) {
    let files = corpus(target);
    for path in &files {
        let data = std::fs::read(path).expect("readable corpus file");
        let outcome = std::panic::catch_unwind(|| entry_point(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} panicked (replay with `cargo fuzz run -s none {target} {}`)",
            path.display(),
            path.display()
        );
    }
    eprintln!("{target}: replayed {} corpus files", files.len());
}

#[test]
fn policy_load_corpus_replays_clean() {
    replay("policy_load", airlock_core::fuzzing::policy_load);
}

#[test]
fn policy_eval_corpus_replays_clean() {
    replay("policy_eval", airlock_core::fuzzing::policy_eval);
}
