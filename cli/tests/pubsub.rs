//! `spindle pub` and `spindle sub` run as a user runs them: two processes over tcp on
//! loopback, given only the avionics IDL file, exchange samples; what `sub` prints decodes
//! with the generated avionics code to exactly what `pub` sent. Bad input (malformed JSON,
//! a wrong member, an unknown type, a missing configuration) is a clear message and exit 2.
//! No timing is asserted; every wait is bounded.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use spindle_dynamic::DynType;
use spindle_topics::{avionics, Endianness, TopicType};

const BIN: &str = env!("CARGO_BIN_EXE_spindle");
const IDL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../topics/idl/avionics.idl");
/// Bound on every process of a test.
const PROCESS_DEADLINE: Duration = Duration::from_secs(120);

/// A child that is killed if the test fails half-way.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Two member configurations: node 1 starts the domain, node 2 joins through it. The
/// failure detector is generous: a debug build on a shared machine is slow.
fn configs(dir: &Path) -> (PathBuf, PathBuf) {
    let port = free_port();
    let fabric = "[fabric]\nsuspect_floor_ms = 2000\nsuspect_ceiling_ms = 10000\n";
    let n1 = dir.join("node1.toml");
    std::fs::write(
        &n1,
        format!("node_id = 1\ntransport = \"tcp\"\nlisten = \"127.0.0.1:{port}\"\nbootstrap = [1]\n{fabric}"),
    )
    .expect("write config");
    let n2 = dir.join("node2.toml");
    std::fs::write(
        &n2,
        format!("node_id = 2\ntransport = \"tcp\"\nlisten = \"127.0.0.1:0\"\n\n[[contacts]]\nnode = 1\naddress = \"127.0.0.1:{port}\"\n\n{fabric}"),
    )
    .expect("write config");
    (n1, n2)
}

/// Starts `spindle <verb> --config <cfg> <args…>` with the given stdout and stderr (the
/// guard kills it when the test ends).
fn start(verb: &str, cfg: &Path, args: &[&str], stdout: Stdio, stderr: Stdio) -> Guard {
    Guard(
        Command::new(BIN)
            .arg(verb)
            .arg("--config")
            .arg(cfg)
            .args(args)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {verb}: {e}")),
    )
}

/// Waits for a child with a deadline; kills it past the deadline.
fn wait_output(mut g: Guard, what: &str) -> Output {
    let start = Instant::now();
    loop {
        match g.0.try_wait().expect("try_wait") {
            Some(_) => break,
            None if start.elapsed() > PROCESS_DEADLINE => {
                let _ = g.0.kill();
                panic!("{what} did not finish within {PROCESS_DEADLINE:?}");
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let child = std::mem::replace(
        &mut g.0,
        Command::new("true").spawn().expect("a placeholder process"),
    );
    child.wait_with_output().expect("output")
}

/// How `pub` gets its samples.
enum Source {
    /// `--random N --seed S`.
    Random(u64),
    /// JSON lines on stdin (`--file -`).
    Stdin(String),
    /// JSON lines on stdin written as they come (`--stream`), one of them bad.
    Stream(String),
}

/// Runs `spindle sub` for `count` samples and `spindle pub` of `source`; returns sub's
/// stdout lines.
fn exchange(type_name: &str, topic: &str, count: u64, source: Source) -> Vec<Value> {
    exchange_with(type_name, topic, count, source, &Extra::default())
}

/// What a test adds to [`exchange`].
#[derive(Default)]
struct Extra<'a> {
    /// Arguments for `sub` (`--filter …`).
    sub: &'a [&'a str],
    /// Arguments for `pub`.
    publ: &'a [&'a str],
    /// JSON lines a first `pub` with no extra arguments writes before the real one,
    /// without waiting for readers (what sub must not get).
    decoy: Option<&'a str>,
}

/// [`exchange`] with `extra`.
fn exchange_with(
    type_name: &str,
    topic: &str,
    count: u64,
    source: Source,
    extra: &Extra<'_>,
) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, n2) = configs(dir.path());
    let count_s = count.to_string();
    let sub_args = [
        &["--idl", IDL, "--type", type_name, "--topic", topic][..],
        &["--count", &count_s, "--timeout-s", "90"],
        extra.sub,
    ]
    .concat();
    let mut sub = start("sub", &n1, &sub_args, Stdio::piped(), Stdio::piped());
    // Wait until sub reads, so pub's contact (node 1) is up.
    let stderr = sub.0.stderr.take().expect("sub stderr");
    let rx = common::line_channel(stderr);
    let deadline = Instant::now() + PROCESS_DEADLINE;
    loop {
        let l = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("sub says it is reading");
        if l.starts_with("spindle sub: reading") {
            break;
        }
    }
    if let Some(decoy) = extra.decoy {
        let n2 = n2.display().to_string();
        let d = run(
            &[
                "pub",
                "--config",
                &n2,
                "--idl",
                IDL,
                "--type",
                type_name,
                "--topic",
                topic,
                "--file",
                "-",
                "--wait-readers",
                "0",
                "--no-wait-delivered",
            ],
            Some(decoy),
        );
        assert!(
            d.status.success(),
            "decoy pub: {}",
            String::from_utf8_lossy(&d.stderr)
        );
    }
    let mut cmd = Command::new(BIN);
    cmd.args(["pub", "--config"])
        .arg(&n2)
        .args(["--idl", IDL, "--type", type_name, "--topic", topic])
        .args(["--rate", "50", "--timeout-s", "90"])
        .args(extra.publ)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match &source {
        Source::Random(seed) => {
            cmd.args(["--random", &count_s, "--seed", &seed.to_string()]);
        }
        Source::Stdin(_) => {
            cmd.args(["--file", "-"]);
        }
        Source::Stream(_) => {
            cmd.arg("--stream");
        }
    }
    let mut publ = Guard(cmd.spawn().expect("start pub"));
    {
        use std::io::Write;
        let mut stdin = publ.0.stdin.take().expect("pub stdin");
        if let Source::Stdin(text) | Source::Stream(text) = &source {
            stdin.write_all(text.as_bytes()).expect("write pub stdin");
        }
    }
    let p = wait_output(publ, "pub");
    let perr = String::from_utf8_lossy(&p.stderr);
    if let Source::Stream(_) = source {
        // The bad line is named and skipped; the run says so with exit 2.
        assert_eq!(p.status.code(), Some(2), "pub: {perr}");
        assert!(perr.contains("stdin:3: malformed JSON"), "pub: {perr}");
    } else {
        assert!(p.status.success(), "pub failed: {perr}");
    }
    let s = wait_output(sub, "sub");
    let errs: Vec<String> = rx.try_iter().collect();
    assert!(s.status.success(), "sub failed: {errs:?}");
    String::from_utf8_lossy(&s.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// The samples sub printed decode, with the generated type, to what pub wrote; their
/// SampleInfo names pub's writer, in one increasing order, with the instance's key hash.
/// `how`: "random" (`--random`), "stdin" (JSON lines, `--file -`) or "stream" (JSON
/// lines with a malformed third line, `--stream`).
fn check_exchange<T: TopicType + PartialEq + std::fmt::Debug>(
    type_name: &str,
    topic: &str,
    how: &str,
) {
    const COUNT: u64 = 5;
    const SEED: u64 = 42;
    let t = DynType::from_idl_file(Path::new(IDL), &[] as &[&str], type_name).expect("type");
    let mut text: Vec<String> = (0..COUNT)
        .map(|i| t.random_json(SEED + i).unwrap().to_string())
        .collect();
    let source = match how {
        "stdin" => Source::Stdin(text.join("\n") + "\n"),
        "stream" => {
            text.insert(2, "{\"aircraft_id\": ".to_string());
            Source::Stream(text.join("\n") + "\n")
        }
        _ => Source::Random(SEED),
    };
    let lines = exchange(type_name, topic, COUNT, source);
    let samples: Vec<&Value> = lines.iter().filter(|l| l.get("data").is_some()).collect();
    assert_eq!(samples.len() as u64, COUNT, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.get("view").is_some()),
        "no view line: {lines:?}"
    );
    let mut last = (0u64, 0u64);
    for (i, s) in samples.iter().enumerate() {
        // What pub sent, decoded by the generated code …
        let sent = t
            .encode_json(&t.random_json(SEED + i as u64).unwrap(), Endianness::Little)
            .expect("encode sent");
        let want = T::decode(&sent.bytes).expect("generated decode of what pub sent");
        // … and what sub printed, decoded by the generated code.
        let got = t
            .encode_json(&s["data"], Endianness::Big)
            .expect("sub's JSON is a valid sample");
        assert_eq!(T::decode(&got.bytes).expect("generated decode"), want);
        let info = &s["info"];
        assert_eq!(
            info["writer"].as_str().map(|w| w.starts_with("2.")),
            Some(true),
            "{info}"
        );
        assert_eq!(info["valid_data"], true);
        assert_eq!(info["instance_state"], "alive");
        assert_eq!(
            info["instance"].as_str(),
            Some(want.key_hash().expect("key hash").to_string().as_str())
        );
        let at = (
            info["view_id"].as_u64().expect("view_id"),
            info["order_index"].as_u64().expect("order_index"),
        );
        assert!(at > last, "{at:?} after {last:?}: not in the topic's order");
        last = at;
    }
}

#[test]
fn pub_and_sub_exchange_avionics_flight_plans_given_only_the_idl() {
    check_exchange::<avionics::FlightPlan>("Avionics::FlightPlan", "FlightPlan", "random");
}

#[test]
fn pub_and_sub_exchange_avionics_track_reports_given_only_the_idl() {
    check_exchange::<avionics::TrackReport>("::Avionics::TrackReport", "Tracks", "random");
}

/// A string key that can be longer than 16 bytes (so the key hash is an MD5), samples as
/// JSON lines on stdin.
#[test]
fn pub_reads_json_lines_from_stdin_and_sub_gets_health_heartbeats() {
    check_exchange::<avionics::HealthHeartbeat>("Avionics::HealthHeartbeat", "Health", "stdin");
}

/// `sub --filter` reads through a content filter resolved against the type read from the
/// IDL (an enum by number, a parameter): of eight heartbeats it prints exactly the three
/// that pass, in order.
#[test]
fn sub_filters_samples_of_a_type_known_only_from_the_idl() {
    const STATUS: [&str; 4] = ["NOMINAL", "DEGRADED", "FAILED", "OFFLINE"];
    let text: String = (0..8)
        .map(|i| {
            format!(
                "{{\"aircraft_id\": 1, \"subsystem\": \"hyd\", \"sequence_number\": {i}, \
                 \"status\": \"{}\", \"severity_code\": \"I\", \"temperature_c\": 20, \
                 \"detail\": \"\", \"fault_codes\": []}}\n",
                STATUS[i % 4]
            )
        })
        .collect();
    // DEGRADED is 1: sequence numbers 1 and 5 pass by status, 7 by the parameter.
    let lines = exchange_with(
        "Avionics::HealthHeartbeat",
        "HealthFiltered",
        3,
        Source::Stdin(text),
        &Extra {
            sub: &[
                "--filter",
                "status = 1 OR sequence_number > %0",
                "--filter-param",
                "6",
                "--data-only",
            ],
            ..Default::default()
        },
    );
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| l["sequence_number"].as_u64().expect("a heartbeat"))
        .collect();
    assert_eq!(seqs, [1, 5, 7], "{lines:?}");
}

/// `--partition` reaches the publisher and subscriber: a sub in `fleet/*` gets what a
/// pub in `fleet/a` writes, and nothing of a pub in the default partition before it.
#[test]
fn sub_and_pub_meet_in_a_partition_and_not_outside_it() {
    let line = |id: u32, seq: u32| {
        format!(
            "{{\"aircraft_id\": {id}, \"subsystem\": \"hyd\", \"sequence_number\": {seq}, \
             \"status\": \"NOMINAL\", \"severity_code\": \"I\", \"temperature_c\": 20, \
             \"detail\": \"\", \"fault_codes\": []}}\n"
        )
    };
    let decoy: String = (0..3).map(|i| line(111, i)).collect();
    let lines = exchange_with(
        "Avionics::HealthHeartbeat",
        "HealthPartitioned",
        3,
        Source::Stdin((0..3).map(|i| line(222, i)).collect()),
        &Extra {
            sub: &["--partition", "fleet/*", "--data-only"],
            publ: &["--partition", "fleet/a"],
            decoy: Some(&decoy),
        },
    );
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| l["aircraft_id"].as_u64().expect("a heartbeat"))
        .collect();
    assert_eq!(ids, [222, 222, 222], "{lines:?}");
}

/// Two IDL files that define one type name differently (two programs' `T::Plain`): a
/// `sub` of one and a `pub` of the other do not match, so the sub never takes the pub's
/// bytes (which it would decode as garbage), and both warn naming the topic
/// (INCONSISTENT_TOPIC). A `pub` of the sub's own definition after it is what the sub
/// prints: the first and only sample it takes.
#[test]
fn sub_and_pub_of_two_definitions_of_one_type_name_exchange_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, n2) = configs(dir.path());
    let mine = dir.path().join("mine.idl");
    std::fs::write(&mine, "module T { struct Plain { long x; }; };\n").expect("write idl");
    let theirs = dir.path().join("theirs.idl");
    std::fs::write(
        &theirs,
        "module T {\n  // the same name, another definition\n  struct Plain { string<8> x; double y; };\n};\n",
    )
    .expect("write idl");
    let topic = ["--type", "T::Plain", "--topic", "Plains"];
    let mine_s = mine.to_string_lossy();
    let sub_args = [
        &["--idl", &mine_s][..],
        &topic,
        &["--count", "1", "--data-only", "--timeout-s", "90"],
    ]
    .concat();
    let mut sub = start("sub", &n1, &sub_args, Stdio::piped(), Stdio::piped());
    let stderr = sub.0.stderr.take().expect("sub stderr");
    let rx = common::line_channel(stderr);
    let deadline = Instant::now() + PROCESS_DEADLINE;
    let mut sub_err = Vec::new();
    loop {
        let l = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("sub says it is reading");
        let reading = l.starts_with("spindle sub: reading");
        sub_err.push(l);
        if reading {
            break;
        }
    }
    let pub_of = |idl: &Path, sample: &str, readers: &str| {
        let (cfg, idl) = (n2.display().to_string(), idl.display().to_string());
        let mut a = vec!["pub", "--config", &cfg, "--idl", &idl];
        a.extend(topic);
        a.extend(["--wait-readers", readers, "--timeout-s", "90", sample]);
        run(&a, None)
    };
    // Theirs writes without waiting for readers: none matches it.
    let bad = pub_of(&theirs, r#"{"x": "mistyped", "y": 1.5}"#, "0");
    let bad_err = String::from_utf8_lossy(&bad.stderr);
    assert!(bad.status.success(), "pub of theirs: {bad_err}");
    assert!(
        bad_err.contains("reader")
            && bad_err.contains("on topic \"Plains\"")
            && bad_err.contains("defined differently")
            && bad_err.contains("INCONSISTENT_TOPIC"),
        "pub of theirs warns of the sub's reader: {bad_err}"
    );
    let good = pub_of(&mine, r#"{"x": 7}"#, "1");
    let s = wait_output(sub, "sub");
    // The forwarding thread ends at the sub's end of stderr.
    sub_err.extend(rx.iter());
    let got: Vec<Value> = String::from_utf8_lossy(&s.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(got, [serde_json::json!({"x": 7})], "sub: {sub_err:?}");
    assert!(s.status.success(), "sub: {sub_err:?}");
    assert!(
        good.status.success(),
        "pub of mine: {}",
        String::from_utf8_lossy(&good.stderr)
    );
    assert!(
        sub_err.iter().any(|l| l.contains("writer")
            && l.contains("on topic \"Plains\"")
            && l.contains("defined differently")),
        "sub warns of the other definition's writer: {sub_err:?}"
    );
}

/// `--stream` writes each line as it comes, names and skips a bad one, and exits 2.
#[test]
fn pub_streams_stdin_skipping_a_bad_line() {
    check_exchange::<avionics::AirData>("Avionics::AirData", "AirData", "stream");
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run spindle");
    if let Some(text) = stdin {
        use std::io::Write;
        c.stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    } else {
        drop(c.stdin.take());
    }
    wait_output(Guard(c), &format!("spindle {args:?}"))
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn assert_exit_2(o: &Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(want), "stderr {err:?} lacks {want:?}");
}

#[test]
fn bad_input_is_a_clear_error_and_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, _) = configs(dir.path());
    let cfg = n1.to_string_lossy().to_string();
    let base = ["pub", "--config", &cfg, "--idl", IDL, "--topic", "AirData"];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };

    let v = with(&["--type", "Avionics::AirData", "{\"aircraft_id\": 1,"]);
    assert_exit_2(&run(&args(&v), None), "argument 1: malformed JSON");

    let v = with(&["--type", "Avionics::AirData", "--file", "-"]);
    let o = run(&args(&v), Some("{\"aircraft_id\": 1, \"wings\": 2}\n"));
    assert_exit_2(&o, "Avionics::AirData has no member `wings`");

    let hb = r#"{"aircraft_id": 1, "subsystem": "a subsystem name longer than 16", "sequence_number": 0,
        "status": "NOMINAL", "severity_code": "I", "temperature_c": 20, "detail": "", "fault_codes": []}"#;
    let v = with(&[
        "--type",
        "Avionics::HealthHeartbeat",
        &hb.replace('\n', " "),
    ]);
    assert_exit_2(
        &run(&args(&v), None),
        "Avionics::HealthHeartbeat.subsystem: string of 31 bytes, its bound is 16",
    );

    let v = with(&["--type", "Avionics::Airdata", "{}"]);
    assert_exit_2(
        &run(&args(&v), None),
        "no type `Avionics::Airdata` in the IDL",
    );

    let o = run(
        &[
            "sub",
            "--config",
            &cfg,
            "--idl",
            IDL,
            "--type",
            "Avionics::Nope",
            "--topic",
            "X",
        ],
        None,
    );
    assert_exit_2(&o, "no type `Avionics::Nope`");

    let o = run(
        &[
            "sub",
            "--config",
            "no/such.toml",
            "--idl",
            IDL,
            "--type",
            "Avionics::AirData",
            "--topic",
            "X",
        ],
        None,
    );
    assert_exit_2(&o, "no/such.toml");

    let o = run(&["sub", "--idl", IDL], None);
    assert_exit_2(&o, "--config");

    let o = run(
        &[
            "sub",
            "--config",
            &cfg,
            "--idl",
            IDL,
            "--type",
            "Avionics::HealthHeartbeat",
            "--topic",
            "X",
            "--filter",
            "status = 1 AND wings > 2",
        ],
        None,
    );
    assert_exit_2(
        &o,
        "--filter: bad parameter: filter expression at byte 15: member `wings`",
    );

    // Flags no run can use are refused before joining (nothing listens at node 1 here:
    // a join would time out, not exit 2 at once).
    let ok = "{\"aircraft_id\": 1}";
    for (extra, want) in [
        (&["--max-blocking-s=-1"][..], "max_blocking_time"),
        (&["--history", "0"], "--history"),
        (&["--rate", "1e-300"], "--rate 1e-300"),
        (&["--timeout-s", "18446744073709551615"], "--timeout-s"),
    ] {
        let mut v = with(&["--type", "Avionics::AirData", ok]);
        v.extend(extra.iter().map(|s| s.to_string()));
        assert_exit_2(&run(&args(&v), None), want);
    }
    let v = with(&[
        "--type",
        "Avionics::AirData",
        "--durability",
        "persistent",
        "--random",
        "1",
    ]);
    assert_exit_2(&run(&args(&v), None), "sets no data_dir");
    for (bad, want) in [
        (&["--metrics", "nonsense"][..], "--metrics"),
        // Options of --watch alone would be ignored: refused instead.
        (&["--count", "3"][..], "--watch"),
        (&["--interval-ms", "50"][..], "--watch"),
        (&["--watch", "--count", "0"][..], "--count"),
    ] {
        let mut v = vec!["status", "--config", &cfg];
        v.extend_from_slice(bad);
        assert_exit_2(&run(&v, None), want);
    }
}

/// `sub --count N` prints N samples, however many the reader holds.
#[test]
fn sub_prints_exactly_its_count() {
    let lines = exchange_with(
        "Avionics::AirData",
        "Counted",
        3,
        Source::Random(7),
        &Extra {
            sub: &["--data-only"],
            publ: &["--count", "20"],
            decoy: None,
        },
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
}

/// Ctrl-C ends `pub --stream` while it waits for its next line, with exit 130.
#[test]
fn an_interrupted_stream_pub_stops_while_waiting_for_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, _) = configs(dir.path());
    let mut publ = Guard(
        Command::new(BIN)
            .args(["pub", "--config"])
            .arg(&n1)
            .args([
                "--idl",
                IDL,
                "--type",
                "Avionics::AirData",
                "--topic",
                "Waiting",
            ])
            .args(["--stream", "--wait-readers", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pub"),
    );
    // Its input stays open, empty: before the fix it waited on it until it closed.
    let _input = publ.0.stdin.take().expect("stdin");
    std::thread::sleep(Duration::from_secs(2));
    signal(&publ.0, "-INT");
    let o = wait_output(publ, "pub");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
}

#[test]
fn idl_lists_types_and_prints_a_template_that_pub_accepts() {
    let o = run(&["idl", IDL, "--types"], None);
    assert!(o.status.success());
    let types = String::from_utf8_lossy(&o.stdout);
    assert!(
        types.lines().any(|l| l == "Avionics::FlightPlan"),
        "{types}"
    );
    let o = run(&["idl", IDL, "--template", "Avionics::FlightPlan"], None);
    assert!(o.status.success());
    let template: Value = serde_json::from_slice(&o.stdout).expect("template JSON");
    let t = DynType::from_idl_file(Path::new(IDL), &[] as &[&str], "Avionics::FlightPlan")
        .expect("type");
    let s = t
        .encode_json(&template, Endianness::Little)
        .expect("template encodes");
    assert_eq!(
        avionics::FlightPlan::decode(&s.bytes)
            .expect("decodes")
            .aircraft_id,
        0
    );
    // The compiler, as spindle-idlc.
    let out = tempfile::tempdir().expect("tempdir");
    let o = run(&["idl", IDL, "--out", &out.path().to_string_lossy()], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let code = std::fs::read_to_string(out.path().join("avionics.rs")).expect("generated");
    assert!(code.contains("pub struct FlightPlan"));
    let bad = out.path().join("bad.idl");
    std::fs::write(&bad, "struct S { long x };").expect("write");
    let o = run(
        &[
            "idl",
            &bad.to_string_lossy(),
            "--out",
            &out.path().to_string_lossy(),
        ],
        None,
    );
    assert_exit_2(&o, "expected `;` after the member declaration");
    // Several files: a template comes from the one that defines the type (once even
    // where another includes it), and a type two files define differently is refused.
    let only = out.path().join("only.idl");
    std::fs::write(&only, "module M { struct Only { long a; }; };").expect("write");
    let o = run(
        &["idl", IDL, &only.to_string_lossy(), "--template", "M::Only"],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let template: Value = serde_json::from_slice(&o.stdout).expect("one template");
    assert_eq!(template, serde_json::json!({"a": 0}));
    let dupe = out.path().join("dupe.idl");
    std::fs::write(&dupe, "module Avionics { struct AirData { long z; }; };").expect("write");
    let o = run(
        &[
            "idl",
            IDL,
            &dupe.to_string_lossy(),
            "--template",
            "Avionics::AirData",
        ],
        None,
    );
    assert_exit_2(&o, "Avionics::AirData is defined differently in");
    let o = run(&["idl", IDL, &dupe.to_string_lossy(), "--types"], None);
    let types = String::from_utf8_lossy(&o.stdout);
    assert_eq!(types.matches("Avionics::AirData\n").count(), 1, "{types}");
}

#[test]
fn rust_log_shows_the_engines_events_on_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, _) = configs(dir.path());
    let o = Command::new(BIN)
        .args(["sub", "--config"])
        .arg(&n1)
        .args([
            "--idl",
            IDL,
            "--type",
            "Avionics::AirData",
            "--topic",
            "AirData",
        ])
        .args(["--count", "1", "--timeout-s", "1"])
        .env("RUST_LOG", "spindle_group=info")
        .output()
        .expect("run sub");
    // No sample comes (nobody writes): exit 1 after the time-out, but the view was logged.
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("installing view"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "no colour codes off a terminal: {err}"
    );
}

/// The next of `rx`'s JSON lines (a sub's) that `want` matches, the others skipped;
/// waits at most [`PROCESS_DEADLINE`].
/// The arguments of the AirData topic `name`.
fn air_data(name: &'static str) -> [&'static str; 6] {
    ["--idl", IDL, "--type", "Avionics::AirData", "--topic", name]
}

/// A `sub` of `topic` on `cfg`'s node, once it printed its first view (itself alone),
/// and its stdout lines from there.
fn first_sub(
    cfg: &Path,
    topic: &[&str],
    stderr: Stdio,
) -> (Guard, std::sync::mpsc::Receiver<String>) {
    let mut sub = start("sub", cfg, topic, Stdio::piped(), stderr);
    let rx = common::line_channel(sub.0.stdout.take().expect("sub stdout"));
    next_json(&rx, &|v| v["view"]["members"] == serde_json::json!([1]));
    (sub, rx)
}

fn next_json(rx: &std::sync::mpsc::Receiver<String>, want: &dyn Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PROCESS_DEADLINE;
    loop {
        let l = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("a line from sub");
        let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
        if want(&v) {
            return v;
        }
    }
}

/// Sends `signal` (`-INT`, `-TERM`) to `child` with the system's `kill`.
fn signal(child: &Child, signal: &str) {
    let s = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(s.success(), "kill {signal}");
}

/// Ctrl-C (SIGINT) or SIGTERM stops `pub` and `sub` the way their normal end does: they
/// leave the domain (a view change without them) and exit 130. In a domain of two, the
/// member left keeps going: a bare exit would look like a crash and cost it its
/// majority.
#[test]
fn an_interrupted_pub_leaves_the_domain_and_the_sub_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, n2) = configs(dir.path());
    let topic = air_data("Interrupted");
    let (mut sub, rx) = first_sub(&n1, &topic, Stdio::piped());
    let until = |want: &dyn Fn(&Value) -> bool| next_json(&rx, want);
    let pub_args = [&topic[..], &["--rate", "20", "--random", "100000"]].concat();
    let publ = start("pub", &n2, &pub_args, Stdio::piped(), Stdio::piped());
    until(&|v| v.get("data").is_some());
    signal(&publ.0, "-INT");
    let p = wait_output(publ, "pub");
    let perr = String::from_utf8_lossy(&p.stderr);
    assert_eq!(p.status.code(), Some(130), "pub: {perr}");
    assert!(
        perr.contains("samples written; left the domain"),
        "pub: {perr}"
    );
    // The sub sees the view without the pub. Before it (the sub may print the view
    // first), the pub's writer ended its instances as it left: the sub's line for such
    // a notice (no data) names the instance's key.
    let notice = std::cell::RefCell::new(None);
    let left = std::cell::Cell::new(false);
    until(&|v| {
        if v["info"]["valid_data"] == false && notice.borrow().is_none() {
            *notice.borrow_mut() = Some(v.clone());
        }
        left.set(left.get() || v["view"]["members"] == serde_json::json!([1]));
        left.get() && notice.borrow().is_some()
    });
    let notice = notice.into_inner().expect("a notice");
    assert!(
        notice["key"]["aircraft_id"].is_u64() && notice["key"].as_object().unwrap().len() == 1,
        "{notice}"
    );
    assert!(
        sub.0.try_wait().expect("try_wait").is_none(),
        "sub ended with the pub"
    );
    signal(&sub.0, "-TERM");
    let s = wait_output(sub, "sub");
    let serr = String::from_utf8_lossy(&s.stderr);
    assert_eq!(s.status.code(), Some(130), "sub: {serr}");
    assert!(
        serr.contains("samples read; left the domain"),
        "sub: {serr}"
    );
}

/// A pub SIGKILLed in a domain of three (the sub's majority stays): the sub, which took
/// its samples, sees the pub's instance end with a notice the sub's reader made itself:
/// no data, NOT_ALIVE_NO_WRITERS, the instance's key, and `"order_index": null` (in no
/// total order).
#[test]
fn a_killed_pubs_instance_ends_at_the_sub_with_a_notice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, n2) = configs(dir.path());
    let n3 = dir.path().join("node3.toml");
    let text = std::fs::read_to_string(&n2).expect("node 2's config");
    std::fs::write(&n3, text.replace("node_id = 2", "node_id = 3")).expect("write config");
    let topic = air_data("Killed");
    let (mut sub, rx) = first_sub(&n1, &topic, Stdio::null());
    let _third = start("sub", &n3, &topic, Stdio::null(), Stdio::null());
    next_json(&rx, &|v| v["view"]["members"] == serde_json::json!([1, 3]));
    let pub_args = [&topic[..], &["--rate", "20", "--random", "100000"]].concat();
    let mut publ = start("pub", &n2, &pub_args, Stdio::null(), Stdio::null());
    next_json(&rx, &|v| v.get("data").is_some_and(|d| !d.is_null()));
    // SIGKILL: no deletion, no leave; the others exclude it.
    publ.0.kill().expect("kill pub");
    let notice = next_json(&rx, &|v| v["info"]["valid_data"] == false);
    assert!(notice["info"]["order_index"].is_null(), "{notice}");
    assert_eq!(
        notice["info"]["instance_state"], "not_alive_no_writers",
        "{notice}"
    );
    assert!(notice["key"]["aircraft_id"].is_u64(), "{notice}");
    assert!(
        sub.0.try_wait().expect("try_wait").is_none(),
        "sub ended with the pub"
    );
}

/// `pub --action dispose` with only the key members: the sub sees the instance end, named
/// by its key though no data of it ever came (the dispose carries the value), then the
/// pub's exit ends it again (a dispose under autodispose, and the unregister). A later
/// pub's sample, after them in the topic's order, closes the count.
#[test]
fn pub_disposes_an_instance_given_its_key_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n1, n2) = configs(dir.path());
    let topic = air_data("Ended");
    let (_sub, rx) = first_sub(&n1, &topic, Stdio::null());
    let dispose = [
        &topic[..],
        &["--action", "dispose", r#"{"aircraft_id": 8}"#],
    ]
    .concat();
    let out = wait_output(
        start("pub", &n2, &dispose, Stdio::null(), Stdio::piped()),
        "pub --action dispose",
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("disposed 1 instances of Ended"), "{said}");
    let fence = [&topic[..], &["--random", "1"]].concat();
    let out = wait_output(
        start("pub", &n2, &fence, Stdio::null(), Stdio::null()),
        "the fence pub",
    );
    assert!(out.status.success());
    let mut notices = Vec::new();
    loop {
        let v = next_json(&rx, &|v| v.get("info").is_some());
        if v["info"]["valid_data"] == true {
            break;
        }
        if v["key"]["aircraft_id"] == 8 {
            notices.push(v);
        }
    }
    assert_eq!(notices.len(), 3, "{notices:?}");
    assert_eq!(
        notices[0]["info"]["instance_state"], "not_alive_disposed",
        "{notices:?}"
    );
}
