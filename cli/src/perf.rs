//! `spindle perf`: the DCPS benchmark (`spindle_examples::perf`, the code of `dds_perf`)
//! with a human table or `--json`, and pass/fail criteria for CI.
//!
//! It runs two processes on this machine (this executable again, `spindle perf … pub` and
//! `… sub`): a throughput run (publisher → subscriber, `msgs_per_s`), `--latency` (one
//! sample in flight, write to delivery in the writer's own participant, `lat_p99_us`) or
//! `--pingpong` (the round trip between the two, `rtt_p99_us`).

use clap::{Args, Subcommand};
use serde_json::Value;
use spindle_examples::perf::Role;

use crate::sweep::SweepArgs;
use crate::Fail;

/// What `spindle perf` runs besides one benchmark.
#[derive(Debug, Subcommand)]
pub enum PerfMode {
    /// A grid of sizes × levels × transports: progress bar, CSV, JSON and SVG plots.
    Sweep(SweepArgs),
    /// The publisher (ping) process of a run (started by `spindle perf` itself).
    #[command(hide = true)]
    Pub {
        /// Where to listen.
        listen: String,
    },
    /// The subscriber (pong) process of a run (started by `spindle perf` itself).
    #[command(hide = true)]
    Sub {
        /// Where to listen.
        listen: String,
        /// The publisher's address.
        contact: String,
    },
}

/// `spindle perf`.
#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(flatten)]
    pub run: spindle_examples::perf::Args,
    #[command(subcommand)]
    pub mode: Option<PerfMode>,
    /// Print the result as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Fail (exit 1) when the throughput run's rate is below this, samples per second.
    #[arg(long, value_name = "SAMPLES_PER_S")]
    pub min_rate: Option<f64>,
    /// Fail (exit 1) when the 99th percentile latency (`--latency`) or round trip
    /// (`--pingpong`) is above this, microseconds.
    #[arg(long, value_name = "US")]
    pub max_p99: Option<f64>,
}

/// A criterion and whether the result met it.
fn criteria(a: &PerfArgs, r: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    if let Some(min) = a.min_rate {
        let rate = r["msgs_per_s"].as_f64();
        out.push((
            format!(
                "rate {} >= {min} samples/s",
                rate.map_or("none".into(), |x| format!("{x:.0}"))
            ),
            rate.is_some_and(|x| x >= min),
        ));
    }
    if let Some(max) = a.max_p99 {
        let key = if a.run.pingpong {
            "rtt_p99_us"
        } else {
            "lat_p99_us"
        };
        let p99 = r[key].as_f64();
        out.push((
            format!(
                "{key} {} <= {max} us",
                p99.map_or("none".into(), |x| format!("{x:.1}"))
            ),
            p99.is_some_and(|x| x <= max),
        ));
    }
    out
}

/// Runs `spindle perf`.
pub fn run_perf(a: PerfArgs) -> Result<u8, Fail> {
    let role = match &a.mode {
        Some(PerfMode::Sweep(s)) => return crate::sweep::run_sweep(&a.run, s),
        Some(PerfMode::Pub { listen }) => Some(Role::Pub {
            listen: listen.clone(),
        }),
        Some(PerfMode::Sub { listen, contact }) => Some(Role::Sub {
            listen: listen.clone(),
            contact: contact.clone(),
        }),
        None => None,
    };
    if a.max_p99.is_some() && !a.run.latency && !a.run.pingpong && role.is_none() {
        return Err(Fail::input(
            "--max-p99 needs --latency or --pingpong (a throughput run measures no latency)",
        ));
    }
    a.run
        .check()
        .map_err(|e| Fail::input(format!("perf: {e}")))?;
    let result = spindle_examples::perf::run(&a.run, role, &["perf".to_string()])
        .map_err(|e| Fail::failed(format!("perf: {e}")))?;
    // A role's process: it spoke to its driver.
    let Some(text) = result else { return Ok(0) };
    let r: Value = serde_json::from_str(&text)
        .map_err(|e| Fail::failed(format!("perf: unreadable result {text:?}: {e}")))?;
    let checks = criteria(&a, &r);
    let mut out = r.clone();
    if !checks.is_empty() {
        out["criteria"] = checks
            .iter()
            .map(|(what, ok)| serde_json::json!({"criterion": what, "passed": ok}))
            .collect();
    }
    if a.json {
        println!("{out}");
    } else {
        print!("{}", table(&r));
        for (what, ok) in &checks {
            println!("{:<8} {what}", if *ok { "PASS" } else { "FAIL" });
        }
    }
    Ok(if checks.iter().all(|(_, ok)| *ok) {
        0
    } else {
        crate::EXIT_FAILED
    })
}

/// The result as an aligned two-column table, keys in alphabetical order. A throughput
/// run measures no latency: its `lat_*` fields (0 in the JSON) are left out rather than
/// shown as a latency of 0 µs.
fn table(r: &Value) -> String {
    let Some(obj) = r.as_object() else {
        return format!("{r}\n");
    };
    let unmeasured = |k: &str| k.starts_with("lat_") && r["latency_mode"] == Value::Bool(false);
    let width = obj.keys().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in obj.iter().filter(|(k, _)| !unmeasured(k)) {
        let shown = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!("{k:<width$}  {shown}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn a_throughput_table_shows_no_latency_and_a_latency_table_does() {
        let run = |latency: bool| serde_json::json!({"latency_mode": latency, "lat_p50_us": 0.0, "msgs_per_s": 5});
        let throughput = table(&run(false));
        assert!(!throughput.contains("lat_p50_us"), "{throughput}");
        assert!(throughput.contains("msgs_per_s    5"), "{throughput}");
        assert!(table(&run(true)).contains("lat_p50_us    0.0"));
    }
}
