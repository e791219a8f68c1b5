//! `spindle perf sweep`: the DCPS benchmark over a grid of sizes × levels × transports —
//! one throughput run and one ping/pong run per cell — with a progress bar, the results
//! as CSV and JSON, and SVG plots of rate and round trip against size.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use serde_json::{json, Value};

use crate::Fail;

/// Most cells one sweep runs (each starts four processes).
pub const SWEEP_CELLS_MAX: usize = 256;

/// `spindle perf sweep`.
#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// Payload sizes, bytes (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "16,256,1024,4096,16384")]
    pub sizes: Vec<usize>,
    /// Delivery levels (unordered, atomic, volatilestore; comma separated).
    #[arg(long, value_delimiter = ',', default_value = "unordered,atomic")]
    pub levels: Vec<String>,
    /// Transports (tcp, shm; comma separated).
    #[arg(long, value_delimiter = ',', default_value = "tcp,shm")]
    pub transports: Vec<String>,
    /// Samples per throughput run.
    #[arg(long, default_value_t = 20_000)]
    pub samples: u64,
    /// Round trips per ping/pong run (after --warmup more).
    #[arg(long, default_value_t = 2_000)]
    pub roundtrips: u64,
    /// Round trips run first and not recorded.
    #[arg(long, default_value_t = 200)]
    pub warmup: u64,
    /// Where to write sweep.csv, sweep.json, rate.svg and rtt.svg.
    #[arg(long, default_value = "sweep")]
    pub out: PathBuf,
}

/// One cell's result.
#[derive(Debug, Clone)]
struct Cell {
    transport: String,
    level: String,
    size: usize,
    msgs_per_s: f64,
    rtt_p50_us: f64,
    rtt_p99_us: f64,
}

fn number(r: &Value, key: &str) -> Result<f64, Fail> {
    r[key]
        .as_f64()
        .ok_or_else(|| Fail::failed(format!("perf measured no {key} (nothing arrived?): {r}")))
}

fn run_one(args: &spindle_examples::perf::Args) -> Result<Value, Fail> {
    args.check()
        .map_err(|e| Fail::input(format!("perf sweep: {e}")))?;
    let text = spindle_examples::perf::run(args, None, &["perf".to_string()])
        .map_err(|e| Fail::failed(format!("perf: {e}")))?
        .ok_or_else(|| Fail::failed("perf: no result"))?;
    serde_json::from_str(&text).map_err(|e| Fail::failed(format!("perf: {text:?}: {e}")))
}

/// Runs `spindle perf sweep` with the benchmark's other settings from `base`.
pub fn run_sweep(base: &spindle_examples::perf::Args, a: &SweepArgs) -> Result<u8, Fail> {
    let cells = a.sizes.len() * a.levels.len() * a.transports.len();
    if cells == 0 || cells > SWEEP_CELLS_MAX {
        return Err(Fail::input(format!(
            "{cells} cells (sizes × levels × transports): 1..={SWEEP_CELLS_MAX}"
        )));
    }
    std::fs::create_dir_all(&a.out)
        .map_err(|e| Fail::input(format!("{}: {e}", a.out.display())))?;
    let bar = ProgressBar::new(cells as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} cells, {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut results = Vec::with_capacity(cells);
    for transport in &a.transports {
        for level in &a.levels {
            for &size in &a.sizes {
                bar.set_message(format!("{transport} {level} {size} B"));
                let mut t = base.clone();
                t.transport = transport.clone();
                t.level = level.clone();
                t.size = size;
                t.samples = a.samples;
                t.pingpong = false;
                t.latency = false;
                let tp = run_one(&t)?;
                let mut p = t.clone();
                p.pingpong = true;
                p.roundtrips = a.roundtrips;
                p.warmup = a.warmup;
                let pp = run_one(&p)?;
                let cell = Cell {
                    transport: transport.clone(),
                    level: level.clone(),
                    size,
                    msgs_per_s: number(&tp, "msgs_per_s")?,
                    rtt_p50_us: number(&pp, "rtt_p50_us")?,
                    rtt_p99_us: number(&pp, "rtt_p99_us")?,
                };
                let line = format!(
                    "{transport:<4} {level:<13} {size:>6} B  {:>10.0} samples/s  rtt p50 {:>8.1} us  p99 {:>8.1} us",
                    cell.msgs_per_s, cell.rtt_p50_us, cell.rtt_p99_us
                );
                // Above the bar on a terminal; to stderr when the bar is hidden.
                if bar.is_hidden() {
                    eprintln!("{line}");
                } else {
                    bar.println(line);
                }
                results.push(cell);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    write_outputs(&a.out, &results)?;
    println!(
        "{} cells: {}/sweep.csv, sweep.json, rate.svg, rtt.svg",
        results.len(),
        a.out.display()
    );
    Ok(0)
}

fn write_outputs(dir: &Path, cells: &[Cell]) -> Result<(), Fail> {
    let io = |p: &Path, e: std::io::Error| Fail::failed(format!("{}: {e}", p.display()));
    let mut csv = String::from("transport,level,size,msgs_per_s,rtt_p50_us,rtt_p99_us\n");
    for c in cells {
        let _ = writeln!(
            csv,
            "{},{},{},{:.0},{:.3},{:.3}",
            c.transport, c.level, c.size, c.msgs_per_s, c.rtt_p50_us, c.rtt_p99_us
        );
    }
    let path = dir.join("sweep.csv");
    std::fs::write(&path, csv).map_err(|e| io(&path, e))?;
    let rows: Vec<Value> = cells
        .iter()
        .map(|c| {
            json!({"transport": c.transport, "level": c.level, "size": c.size,
                   "msgs_per_s": c.msgs_per_s, "rtt_p50_us": c.rtt_p50_us, "rtt_p99_us": c.rtt_p99_us})
        })
        .collect();
    let path = dir.join("sweep.json");
    std::fs::write(&path, Value::Array(rows).to_string()).map_err(|e| io(&path, e))?;
    plot(
        &dir.join("rate.svg"),
        cells,
        "samples/s against payload size",
        "samples/s",
        |c| c.msgs_per_s,
    )?;
    plot(
        &dir.join("rtt.svg"),
        cells,
        "round trip p50 against payload size",
        "µs",
        |c| c.rtt_p50_us,
    )
}

/// One line per (transport, level), value against size, both axes logarithmic.
fn plot(
    path: &Path,
    cells: &[Cell],
    title: &str,
    y_label: &str,
    y: impl Fn(&Cell) -> f64,
) -> Result<(), Fail> {
    let err = |e: String| Fail::failed(format!("{}: {e}", path.display()));
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for c in cells {
        let name = format!("{} {}", c.transport, c.level);
        let point = (c.size.max(1) as f64, y(c).max(1e-3));
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push(point),
            None => series.push((name, vec![point])),
        }
    }
    let xs = cells.iter().map(|c| c.size.max(1) as f64);
    let ys = cells.iter().map(|c| y(c).max(1e-3));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let (y0, y1) = ys.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            ((x0 / 1.5)..(x1 * 1.5)).log_scale(),
            ((y0 / 1.5)..(y1 * 1.5)).log_scale(),
        )
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("payload bytes")
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|e| err(e.to_string()))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}
