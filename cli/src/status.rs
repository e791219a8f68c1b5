//! `spindle status`: the domain as one member sees it — the installed view (id, members,
//! leader), each subgroup's readers and writers as the view's declarations say, and the
//! topics' readers and writers from the built-in topic. It joins the domain as a member
//! with no entities of its own (that join is a view change the others see too) and
//! leaves when done.
//!
//! Counters: this member's own (`DomainParticipant::counters`), and with `--metrics
//! host:port` (repeatable) those of other participants, scraped from their Prometheus
//! endpoints (`[metrics] listen` in their TOML): delivered, stable, nulls, samples written
//! and received, views installed, state transferred; `--watch` adds rates per second
//! between prints.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};
use spindle_dds_core::declare::{declarations, subgroup_of_id, BUILTIN_SUBGROUP};
use spindle_dds_core::{topic_id, DomainParticipant};

use crate::domain::{join, load_config};
use crate::scrape;
use crate::Fail;

/// `spindle status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// This member's configuration (TOML, as for pub and sub; a node id of its own).
    #[arg(long, short = 'c')]
    pub config: std::path::PathBuf,
    /// Topic names to show by name (announcements carry topic ids, the FNV-1a of names).
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    /// Print the status again whenever it changes, until killed (or --count prints).
    #[arg(long)]
    pub watch: bool,
    /// How often --watch looks, milliseconds.
    #[arg(long, default_value_t = 200, requires = "watch")]
    pub interval_ms: u64,
    /// With --watch: exit after this many prints (at least 1).
    #[arg(long, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// One JSON object per print instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How long to let the built-in topic's table arrive before the first print, ms.
    #[arg(long, default_value_t = 500)]
    pub settle_ms: u64,
    /// A participant's Prometheus endpoint (`[metrics] listen` of its TOML, host:port) to
    /// show the counters of; repeatable.
    #[arg(long = "metrics", value_name = "HOST:PORT", value_parser = socket_address)]
    pub metrics: Vec<String>,
}

/// A `--metrics` value: an IP address and port (what the scrape connects to).
fn socket_address(s: &str) -> Result<String, String> {
    s.parse::<std::net::SocketAddr>()
        .map(|_| s.to_string())
        .map_err(|e| format!("{e}: an IP address and port, as 127.0.0.1:9464"))
}

/// Runs `spindle status`.
pub fn run_status(a: StatusArgs) -> Result<u8, Fail> {
    let cfg = load_config(&a.config)?;
    let p = join(&cfg)?;
    let r = watch(&p, &a, cfg.topic_subgroups);
    if let Err(e) = p.clone().delete() {
        eprintln!("spindle: leaving the domain: {e}; stopping instead");
        p.close();
    }
    r
}

fn watch(p: &DomainParticipant, a: &StatusArgs, topic_subgroups: u32) -> Result<u8, Fail> {
    let names: BTreeMap<u64, &str> = a.topics.iter().map(|n| (topic_id(n), n.as_str())).collect();
    if crate::interrupt::sleep(Duration::from_millis(a.settle_ms)) {
        return Err(crate::interrupt::stopped("before the first look"));
    }
    let mut last: Option<Value> = None;
    let mut printed = 0u64;
    let mut previous = scrape::Previous::default();
    loop {
        let mut now = snapshot(p, &names, topic_subgroups);
        now["participants"] = participants(p, &a.metrics);
        if last.as_ref() != Some(&now) {
            let mut shown = now.clone();
            if let Some(ps) = shown["participants"].as_array_mut() {
                previous.rate(ps);
            }
            if a.json {
                println!("{shown}");
            } else {
                print_table(&shown);
            }
            printed += 1;
            last = Some(now);
        }
        if !a.watch || a.count.is_some_and(|c| printed >= c) {
            return Ok(0);
        }
        if let Some(why) = p.stopped() {
            return Err(Fail::failed(format!("the participant stopped: {why}")));
        }
        if crate::interrupt::sleep(Duration::from_millis(a.interval_ms)) {
            return Err(crate::interrupt::stopped(format!(
                "{printed} looks printed"
            )));
        }
    }
}

/// The status now, as JSON.
fn snapshot(p: &DomainParticipant, names: &BTreeMap<u64, &str>, topic_subgroups: u32) -> Value {
    let Some(view) = p.view() else {
        return json!({"node": p.node_id(), "view": null});
    };
    // Subgroups: who declared reading or writing which.
    let mut subgroups: BTreeMap<u32, (Vec<u32>, Vec<u32>, String)> = BTreeMap::new();
    for (node, decl) in declarations(&view) {
        for (sg, interest) in decl {
            let e = subgroups.entry(sg).or_default();
            if interest.reader {
                e.0.push(node);
            }
            if interest.writer {
                e.1.push(node);
            }
            e.2 = format!("{:?}", interest.level).to_ascii_lowercase();
        }
    }
    let subgroups: Vec<Value> = subgroups
        .into_iter()
        .map(|(sg, (readers, writers, level))| {
            json!({
                "subgroup": if sg == BUILTIN_SUBGROUP { json!("builtin") } else { json!(sg) },
                "readers": readers,
                "writers": writers,
                "level": level,
            })
        })
        .collect();
    // Topics: the built-in topic's table.
    let mut topics: BTreeMap<u64, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for (node, e) in p.discovered_endpoints() {
        let t = topics.entry(e.topic_id).or_default();
        let who = format!("{node}.{}", e.entity);
        if e.reader {
            t.0.push(who);
        } else {
            t.1.push(who);
        }
    }
    let topics: Vec<Value> = topics
        .into_iter()
        .map(|(id, (readers, writers))| {
            json!({
                "topic": names.get(&id).copied(),
                "topic_id": format!("{id:016x}"),
                "subgroup": subgroup_of_id(id, topic_subgroups),
                "readers": readers,
                "writers": writers,
            })
        })
        .collect();
    json!({
        "node": p.node_id(),
        "view": {"id": view.vid, "members": view.members, "leader": view.members.first()},
        "subgroups": subgroups,
        "topics": topics,
    })
}

/// The counters of this member and of the `--metrics` endpoints.
fn participants(p: &DomainParticipant, endpoints: &[String]) -> Value {
    let mut out = vec![json!({
        "source": "self",
        "node": p.node_id(),
        "counters": scrape::to_json(&scrape::own(&p.counters())),
    })];
    for e in endpoints {
        out.push(match scrape::scrape(e) {
            Ok(values) => json!({
                "source": e,
                "counters": scrape::to_json(&values),
            }),
            Err(why) => json!({"source": e, "error": why}),
        });
    }
    Value::Array(out)
}

fn list(v: &Value) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(" "),
        _ => "-".into(),
    }
}

fn print_table(s: &Value) {
    let v = &s["view"];
    println!(
        "view {}  leader {}  members {}  (this member: node {})",
        v["id"],
        v["leader"],
        list(&v["members"]),
        s["node"]
    );
    println!(
        "{:<10} {:<14} {:<20} {:<20}",
        "subgroup", "level", "readers", "writers"
    );
    for sg in s["subgroups"].as_array().into_iter().flatten() {
        let id = match &sg["subgroup"] {
            Value::String(x) => x.clone(),
            other => other.to_string(),
        };
        println!(
            "{id:<10} {:<14} {:<20} {:<20}",
            sg["level"].as_str().unwrap_or("-"),
            list(&sg["readers"]),
            list(&sg["writers"])
        );
    }
    println!(
        "{:<20} {:<18} {:<9} {:<20} {:<20}",
        "topic", "id", "subgroup", "readers", "writers"
    );
    for t in s["topics"].as_array().into_iter().flatten() {
        println!(
            "{:<20} {:<18} {:<9} {:<20} {:<20}",
            t["topic"].as_str().unwrap_or("?"),
            t["topic_id"].as_str().unwrap_or("-"),
            t["subgroup"].to_string(),
            list(&t["readers"]),
            list(&t["writers"])
        );
    }
    print_counters(s);
    println!();
}

fn print_counters(s: &Value) {
    let c = |e: &Value, name: &str| {
        e["counters"][format!("spindle_{name}")]
            .as_u64()
            .map_or_else(|| "-".to_string(), |v| v.to_string())
    };
    println!(
        "{:<22} {:>12} {:>12} {:>10} {:>10} {:>10} {:>6} {:>10}  rates/s (delivered stable written received)",
        "counters of", "delivered", "stable", "nulls", "written", "received", "views", "state_B"
    );
    for e in s["participants"].as_array().into_iter().flatten() {
        let source = e["source"].as_str().unwrap_or("?");
        if let Some(why) = e["error"].as_str() {
            println!("{source:<22} unreadable: {why}");
            continue;
        }
        let r = &e["rates"];
        let rates = if r.is_object() {
            ["delivered", "stable", "samples_written", "samples_received"]
                .iter()
                .map(|k| r[format!("{k}_per_s")].to_string())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            "-".into()
        };
        println!(
            "{source:<22} {:>12} {:>12} {:>10} {:>10} {:>10} {:>6} {:>10}  {rates}",
            c(e, "delivered_total"),
            c(e, "stable_total"),
            c(e, "nulls_sent_total"),
            c(e, "samples_written_total"),
            c(e, "samples_received_total"),
            c(e, "views_installed_total"),
            c(e, "state_received_bytes_total"),
        );
    }
}
