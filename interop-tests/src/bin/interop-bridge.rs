//! The RTPS bridge's command line, built inside this crate so its tests can start it
//! (`CARGO_BIN_EXE_*` names only a crate's own binaries); see `spindle_rtps_bridge::cli`.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    spindle_rtps_bridge::cli::main_with_args(&args)
}
