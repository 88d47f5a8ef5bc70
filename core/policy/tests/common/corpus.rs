//! Replaying a committed cargo-fuzz seed corpus (`fuzz/corpus/<target>/`) through the entry
//! point its target calls. Shared by this crate's replay test and `airlock-core`'s (which
//! includes this file by path), so both replay the same way.

use std::path::{Path, PathBuf};

/// The repository's `fuzz/` folder, found from whichever crate includes this file.
pub fn fuzz_dir() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("fuzz").join("corpus").is_dir() {
        dir = dir
            .parent()
            .unwrap_or_else(|| panic!("no fuzz/corpus above {}", env!("CARGO_MANIFEST_DIR")));
    }
    dir.join("fuzz")
}

pub fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join("corpus").join(target);
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

pub fn replay(target: &str, entry_point: fn(&[u8])) {
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
