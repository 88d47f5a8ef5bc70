//! Replays the committed seed corpora of the gateway's fuzz targets (`fuzz/corpus/gateway_config/`,
//! `fuzz/corpus/client_frame/`) through the entry points the targets call, so `cargo test` checks
//! every seed without cargo-fuzz. A panic names the file.

use std::path::{Path, PathBuf};

use airlock_mcp::config::GatewayConfig;
use airlock_mcp::fuzzing::{client_frame, gateway_config};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus directory {} is missing: {e}", dir.display()))
        .map(|entry| entry.expect("readable corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
}

fn replay(target: &str, entry: fn(&[u8])) -> usize {
    let files = corpus(target);
    for file in &files {
        let data = std::fs::read(file).expect("readable seed");
        let outcome = std::panic::catch_unwind(|| entry(&data));
        assert!(outcome.is_ok(), "{} panicked on {}", target, file.display());
    }
    files.len()
}

#[test]
fn the_gateway_config_corpus_replays_and_its_seeds_load_or_fail_as_named() {
    assert!(replay("gateway_config", gateway_config) >= 10);
    // The loading seeds load; every broken one fails with a key path.
    for file in corpus("gateway_config") {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_str().unwrap();
        let loaded = GatewayConfig::parse(&text);
        match name {
            "spec-example.toml" | "http-server.toml" => {
                assert!(loaded.is_ok(), "{name}: {loaded:?}")
            }
            _ => assert!(loaded.is_err(), "{name} must not load"),
        }
    }
}

#[test]
fn the_client_frame_corpus_replays() {
    assert!(replay("client_frame", client_frame) >= 10);
}
