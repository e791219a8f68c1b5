//! The avionics domain as a test: 8 processes (one publishes 2 MiB terrain tiles) over tcp and over shm, one writer process
//! killed with SIGKILL mid-run, a display that starts late. Every reader of every topic
//! must agree on one order; the late display must hold FlightPlan samples stored before
//! it existed; the killed writer's samples must end at a view change.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use spindle_examples::{check_agreement, parse_log, LogLine};

fn logs(dir: &Path) -> BTreeMap<String, BTreeMap<String, Vec<LogLine>>> {
    let mut by_topic: BTreeMap<String, BTreeMap<String, Vec<LogLine>>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("out dir") {
        let path = e.expect("entry").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("name")
            .to_string();
        let (process, topic) = stem.split_once('-').expect("<process>-<topic>.log");
        let text = std::fs::read_to_string(&path).expect("log");
        let log = parse_log(&stem, &text).expect("well-formed log");
        by_topic
            .entry(topic.to_string())
            .or_default()
            .insert(process.to_string(), log);
    }
    by_topic
}

/// The two transports' runs take turns: sixteen debug-build processes at once, beside the
/// rest of the suite on a small shared host, starved members past their detector's floor.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(transport: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!(
        "spindle-avionics-test-{transport}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_avionics"))
        .args(["--transport", transport, "--seconds", "4"])
        // Eight debug-build processes share the machine with the rest of the suite; the
        // terrain database's 2 MiB tiles (copied in debug builds) stalled it past the
        // default 50 ms floor there. The SIGKILL is noticed at once by its broken links,
        // whatever the floor.
        .args(["--suspect-floor-ms", "250", "--out"])
        .arg(&dir)
        .output()
        .expect("run avionics");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "avionics over {transport} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let by_topic = logs(&dir);
    // TerrainTile: 2 MiB samples (by RDMC), keyed by tile; each display checked every
    // tile's bytes.
    for topic in [
        "AirData",
        "Attitude",
        "NavigationPosition",
        "FlightPlan",
        "TerrainTile",
    ] {
        let l = by_topic
            .get(topic)
            .unwrap_or_else(|| panic!("no logs for {topic}:\n{stdout}"));
        assert!(
            l.contains_key("pfd") && l.contains_key("mfd"),
            "{topic}: both displays log it"
        );
        for (p, log) in l {
            assert!(!log.is_empty(), "{p} took no {topic} sample");
        }
        if let Err(problems) = check_agreement(l) {
            panic!("{transport}: readers of {topic} disagree: {problems:#?}");
        }
    }
    // Two writers in one order: both air-data computers reach every AirData reader.
    let air = &by_topic["AirData"];
    let pfd = &air["pfd"];
    let last_view_of = |w: &str| {
        pfd.iter()
            .filter(|l| l.writer == w)
            .map(|l| l.view_id)
            .max()
    };
    let adc1 = last_view_of("2.1").expect("adc1 samples");
    let adc2 = last_view_of("3.1").expect("adc2 samples");
    assert!(
        adc2 < adc1,
        "the killed adc2's samples end at a view change ({adc2} vs {adc1})"
    );
    // The late display got the stored flight plans from before its first view.
    let mfd_first_air = air["mfd"].first().expect("mfd AirData").view_id;
    let mfd_plans = &by_topic["FlightPlan"]["mfd"];
    assert!(
        mfd_plans.iter().any(|l| l.view_id < mfd_first_air),
        "mfd holds FlightPlan history stored before it joined (first AirData view {mfd_first_air}, plans {:?})",
        mfd_plans.iter().map(|l| l.view_id).collect::<Vec<_>>()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn avionics_over_tcp_kills_a_writer_and_every_reader_agrees() {
    run("tcp");
}

#[test]
fn avionics_over_shm_kills_a_writer_and_every_reader_agrees() {
    run("shm");
}
