//! `spindle-rtps-bridge CONFIG.toml` — see [`spindle_rtps_bridge::cli`].

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    spindle_rtps_bridge::cli::main_with_args(&args)
}
