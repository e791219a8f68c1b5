//! `dds_perf`: the DCPS throughput and latency benchmark between two processes (the code
//! is `spindle_examples::perf`, shared with `spindle perf`; its flags and output are
//! described there).

use clap::Parser;

/// DCPS throughput and latency between two processes.
#[derive(Parser)]
#[command(about = "DCPS throughput and latency between two processes")]
struct Cli {
    #[command(flatten)]
    args: spindle_examples::perf::Args,
    #[command(subcommand)]
    role: Option<spindle_examples::perf::Role>,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cli.args.check() {
        eprintln!("dds_perf: {e}");
        std::process::exit(2);
    }
    match spindle_examples::perf::run(&cli.args, cli.role, &[]) {
        Ok(Some(json)) => println!("{json}"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("dds_perf: {e}");
            std::process::exit(1);
        }
    }
}
