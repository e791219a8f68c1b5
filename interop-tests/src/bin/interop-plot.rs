//! `interop-plot RESULTS.jsonl PREFIX`: the comparison's plots from the JSON lines of
//! `scripts/bench-interop.sh` — `PREFIX-throughput.svg` (samples/s per stack and size,
//! log scale) and `PREFIX-latency.svg` (one-way p50 and p99 per stack and size, and
//! half the ping-pong round trip at 1 kHz where a stack measured that, log scale).

use std::process::ExitCode;

use plotters::prelude::*;

/// One bar: its label, its value, and a second value drawn as a thinner bar (p99).
struct Bar {
    label: String,
    value: f64,
    upper: Option<f64>,
}

fn draw(path: &str, title: &str, y_desc: &str, bars: &[Bar]) -> Result<(), String> {
    let root = SVGBackend::new(path, (1100, 680)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let max = bars
        .iter()
        .map(|b| b.upper.unwrap_or(b.value).max(b.value))
        .fold(1.0f64, f64::max);
    let min = bars
        .iter()
        .map(|b| b.value)
        .filter(|v| *v > 0.0)
        .fold(max, f64::min);
    let n = bars.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(290)
        .y_label_area_size(70)
        // Bar i is centred on x = i, where the mesh puts its key points (labels placed at
        // x = i + 0.5 were never drawn: every x label of the plots came out empty).
        .build_cartesian_2d(
            -0.5f64..n as f64 - 0.5,
            ((min / 2.0).max(1e-3)..max * 2.0).log_scale(),
        )
        .map_err(|e| e.to_string())?;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(
            ("sans-serif", 11)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .y_desc(y_desc)
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, b) in bars.iter().enumerate() {
        let x = i as f64;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x - 0.35, min / 2.0), (x + 0.35, b.value.max(min / 2.0))],
                BLUE.mix(0.6).filled(),
            )))
            .map_err(|e| e.to_string())?;
        if let Some(u) = b.upper {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (x - 0.1, b.value.max(min / 2.0)),
                        (x + 0.1, u.max(min / 2.0)),
                    ],
                    RED.mix(0.6).filled(),
                )))
                .map_err(|e| e.to_string())?;
        }
    }
    root.present().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, prefix] = args.as_slice() else {
        eprintln!("usage: interop-plot RESULTS.jsonl PREFIX");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("interop-plot: {input}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut rows = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => rows.push(v),
            Err(e) => {
                eprintln!("interop-plot: {input}:{}: {e}", i + 1);
                return ExitCode::FAILURE;
            }
        }
    }
    let mut by_size: Vec<&serde_json::Value> = rows.iter().collect();
    by_size.sort_by_key(|r| r["size"].as_u64().unwrap_or(0));
    let label = |r: &serde_json::Value| {
        format!(
            "{} {}B",
            r["stack"].as_str().unwrap_or("?"),
            r["size"].as_u64().unwrap_or(0)
        )
    };
    let throughput: Vec<Bar> = by_size
        .iter()
        .filter(|r| r["mode"] == "throughput")
        .filter_map(|r| {
            Some(Bar {
                label: label(r),
                value: r["msgs_per_s"].as_f64()?,
                upper: None,
            })
        })
        .collect();
    // One-way (measured at the subscriber) and half the paced ping-pong round trip (as
    // `ddsperf ping` prints it), each bar labelled with its measure.
    let latency: Vec<Bar> = by_size
        .iter()
        .filter(|r| r["mode"] == "latency" || r["mode"] == "latency-halfrtt")
        .filter_map(|r| {
            Some(Bar {
                label: if r["mode"] == "latency" {
                    label(r)
                } else {
                    format!("{} (1/2 RTT)", label(r))
                },
                value: r["lat_p50_us"].as_f64()?,
                upper: r["lat_p99_us"].as_f64(),
            })
        })
        .collect();
    let t = draw(
        &format!("{prefix}-throughput.svg"),
        "1 publisher -> 1 subscriber, reliable, keyed: throughput",
        "samples/s (log)",
        &throughput,
    );
    let l = draw(
        &format!("{prefix}-latency.svg"),
        "one-way latency (and 1/2 ping-pong RTT at 1 kHz): p50 (wide bar), p99 (thin bar)",
        "microseconds (log)",
        &latency,
    );
    match t.and(l) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("interop-plot: {e}");
            ExitCode::FAILURE
        }
    }
}
