//! The `airlock` binary: parses arguments and hands off to [`airlock::cli`].

fn main() -> std::process::ExitCode {
    airlock::cli::run()
}
