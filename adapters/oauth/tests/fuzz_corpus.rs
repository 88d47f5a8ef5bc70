//! Replays the committed seed corpus of the `bearer_token` fuzz target
//! (`fuzz/corpus/bearer_token/`) through its entry point, so `cargo test` checks every seed
//! without cargo-fuzz. A panic names the file.

use std::path::Path;

use airlock_oauth::fuzzing::bearer_token;

#[test]
fn the_bearer_token_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/bearer_token");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus directory {} is missing: {e}", dir.display()))
        .map(|entry| entry.expect("readable corpus entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{} holds too few seeds", dir.display());
    for file in &files {
        let data = std::fs::read(file).expect("readable seed");
        let outcome = std::panic::catch_unwind(|| bearer_token(&data));
        assert!(
            outcome.is_ok(),
            "bearer_token panicked on {}",
            file.display()
        );
    }
}
