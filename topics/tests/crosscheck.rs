//! Byte-for-byte cross-check of our CDR against an independent implementation: Cyclone
//! DDS's Python binding (PyPI `cyclonedds`, which ships its own library), driven by
//! `tests/crosscheck/cyclone_cdr.py` in a virtualenv built by `tests/crosscheck/setup.sh`.
//!
//! Two checks:
//! * fixed samples: the script encodes values written in Python; we build the same values
//!   in Rust and compare data (both byte orders), big-endian key and key hash;
//! * seeded random samples: we encode, Cyclone decodes and re-encodes, and the bytes, key
//!   and key hash must be ours.
//!
//! The test skips (with the reason printed) only when the virtualenv cannot be built, e.g.
//! without network. Set `SPINDLE_CROSSCHECK_REQUIRED=1` to make that a failure instead.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use spindle_topics::avionics as av;
use spindle_topics::builtin::examples::{Color, Extras, Point, Reading, Sample};
use spindle_topics::{Endianness, KeyedString, Sequence, TopicType};

/// Seed of the random samples sent through Cyclone.
const SEED: u64 = 0xC1C1_0DD5;
/// Random samples per type.
const RANDOM_SAMPLES_PER_TYPE: usize = 200;

fn crosscheck_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/crosscheck")
}

/// The venv's python, building the venv when needed; `Err(reason)` when it cannot be built.
fn python() -> Result<PathBuf, String> {
    let out = Command::new("bash")
        .arg(crosscheck_dir().join("setup.sh"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run setup.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "setup.sh failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let path = String::from_utf8_lossy(&out.stdout)
        .trim()
        .lines()
        .last()
        .unwrap_or("")
        .to_owned();
    Ok(PathBuf::from(path))
}

fn python_or_skip() -> Option<PathBuf> {
    // Build the venv once per test process; both tests wait for the same result.
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(python).clone() {
        Ok(p) => Some(p),
        Err(reason) => {
            if std::env::var("SPINDLE_CROSSCHECK_REQUIRED").is_ok_and(|v| v == "1") {
                panic!("cross-check venv required but unavailable: {reason}");
            }
            println!("SKIPPED: Cyclone DDS cross-check: the Python venv cannot be built: {reason}");
            None
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Our view of a value: data in both byte orders, big-endian key, key hash.
struct Ours {
    le: String,
    be: String,
    key: String,
    key_hash: String,
    has_key: bool,
}

fn ours<T: TopicType>(v: &T) -> Ours {
    let mut key = Vec::new();
    v.encode_key_be(&mut key).unwrap();
    Ours {
        le: hex(&v.encode(Endianness::Little).unwrap()),
        be: hex(&v.encode(Endianness::Big).unwrap()),
        key: if key.is_empty() {
            "-".into()
        } else {
            hex(&key)
        },
        key_hash: hex(&v.key_hash().unwrap().0),
        has_key: T::HAS_KEY,
    }
}

/// The Rust twin of a fixed sample in `cyclone_cdr.py`, by name.
fn fixed_sample(name: &str) -> Option<Ours> {
    Some(match name {
        "keyed_string" => ours(&KeyedString {
            key: "flight/LX38".into(),
            value: "boarding".into(),
        }),
        "keyed_string_empty" => ours(&KeyedString::default()),
        "sequence" => ours(&Sequence {
            payload: (0..=255).step_by(3).collect(),
        }),
        "sequence_empty" => ours(&Sequence::default()),
        "example_sample" => ours(&Sample {
            id: 0x0102_0304,
            tag: 'Q',
            name: "abc".into(),
            color: Color::Blue,
            origin: Point { x: -2, y: 5 },
            coords: [1.0, -0.5, 2.25],
            path: vec![Point { x: 1, y: 2 }, Point { x: -3, y: -4 }],
            reading: Reading::Level(2, 9.5),
            ok: true,
        }),
        "example_sample_default_branch" => ours(&Sample {
            id: 7,
            tag: 'z',
            name: String::new(),
            color: Color::Green,
            origin: Point { x: 0, y: -1 },
            coords: [0.0, 0.0, -0.0],
            path: vec![],
            reading: Reading::Raw(-300, 200),
            ok: false,
        }),
        "example_extras" => ours(&Extras {
            head: 1,
            a: Some(5),
            b: Some("xy".into()),
            c: Some(2.5),
            tail: 9,
        }),
        "example_extras_absent" => ours(&Extras {
            head: 255,
            a: None,
            b: None,
            c: None,
            tail: 0,
        }),
        name => return avionics_sample(name),
    })
}

fn geo() -> av::GeoPoint {
    av::GeoPoint {
        latitude_deg: 47.4647,
        longitude_deg: 8.5492,
        altitude_m: 432.5,
    }
}

/// The Rust twins of the avionics samples in `cyclone_cdr.py`.
fn avionics_sample(name: &str) -> Option<Ours> {
    Some(match name {
        "air_data" => ours(&av::AirData {
            aircraft_id: 0x4B1805,
            timestamp_ns: 1_700_000_000_123_456_789,
            indicated_airspeed_mps: 128.5,
            true_airspeed_mps: 231.25,
            mach: 0.78,
            pressure_altitude_m: 10668.0,
            vertical_speed_mps: -2.5,
            static_air_temperature_k: 218.15,
            altitude_reference: av::AltitudeReference::Geometric,
        }),
        "attitude" => ours(&av::Attitude {
            aircraft_id: 0x4B1805,
            timestamp_ns: 1_700_000_000_200_000_000,
            roll_rad: 0.0523,
            pitch_rad: -0.0174,
            heading_rad: 2.7925,
            body_rates_radps: [0.01, -0.02, 0.125],
        }),
        "navigation_position" => ours(&av::NavigationPosition {
            aircraft_id: 0x4B1805,
            timestamp_ns: 1_700_000_000_300_000_000,
            position: geo(),
            velocity_ned_mps: [120.5, -33.25, 2.0],
            horizontal_accuracy_m: 3.5,
            gnss_valid: true,
            phase: av::FlightPhase::Approach,
        }),
        "flight_plan" => ours(&av::FlightPlan {
            aircraft_id: 0x4B1805,
            callsign: "SWR38".into(),
            origin: "LSZH".into(),
            destination: "KJFK".into(),
            revision: 3,
            route: vec![
                av::Waypoint {
                    name: "GIPOL".into(),
                    kind: av::WaypointKind::Fix,
                    position: geo(),
                    constraint: av::Constraint::AltitudeM(3048.0),
                },
                av::Waypoint {
                    name: "TRA".into(),
                    kind: av::WaypointKind::Vor,
                    position: av::GeoPoint {
                        latitude_deg: 47.69,
                        longitude_deg: 8.43,
                        altitude_m: 0.0,
                    },
                    constraint: av::Constraint::EtaNs(1_700_003_600_000_000_000),
                },
                av::Waypoint {
                    name: "KJFK".into(),
                    kind: av::WaypointKind::Airport,
                    position: av::GeoPoint {
                        latitude_deg: 40.6413,
                        longitude_deg: -73.7781,
                        altitude_m: 4.0,
                    },
                    constraint: av::Constraint::Unselected(av::ConstraintKind::NoConstraint),
                },
            ],
        }),
        "track_report" => ours(&av::TrackReport {
            sensor_id: 12,
            track_id: 90210,
            timestamp_ns: 1_700_000_000_400_000_000,
            source: av::TrackSource::Adsb,
            identity: av::TrackIdentity::Callsign(3, "DLH4AB".into()),
            position: geo(),
            velocity_ned_mps: [200.0, 10.0, -1.0],
            position_covariance_m2: [[25.0, 0.5, 0.0], [0.5, 25.0, 0.0], [0.0, 0.0, 100.0]],
            quality: 200,
            clock_offset_ns: -1234567,
        }),
        "track_report_mode_a" => ours(&av::TrackReport {
            sensor_id: 65535,
            track_id: 1,
            timestamp_ns: 0,
            source: av::TrackSource::PrimaryRadar,
            identity: av::TrackIdentity::ModeACode(7, 0o7700),
            position: geo(),
            velocity_ned_mps: [0.0, 0.0, 0.0],
            position_covariance_m2: [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            quality: 0,
            clock_offset_ns: 9_000_000_000,
        }),
        "health_heartbeat" => ours(&av::HealthHeartbeat {
            aircraft_id: 0x4B1805,
            subsystem: "FMS-1".into(),
            sequence_number: 42,
            status: av::HealthStatus::Degraded,
            severity_code: 'W',
            temperature_c: -12,
            detail: "GPS 2 lost, using IRS".into(),
            fault_codes: vec![0x1001, 0x2002, 0xDEAD_BEEF],
        }),
        "terrain_tile" => ours(&av::TerrainTile {
            tile_id: 0x2F_0A11,
            revision: 3,
            level: 9,
            south_west: geo(),
            extent_deg: 0.25,
            rows: 3,
            columns: 5,
            elevation_posts: (0..30u32).map(|i| ((i * 37) % 256) as u8).collect(),
        }),
        _ => return None,
    })
}

#[test]
fn fixed_samples_match_cyclone_byte_for_byte() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let out = Command::new(&python)
        .arg(crosscheck_dir().join("cyclone_cdr.py"))
        .arg("samples")
        .output()
        .expect("run cyclone_cdr.py");
    assert!(
        out.status.success(),
        "cyclone_cdr.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut compared = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [name, endian, data, key, key_hash] = f[..] else {
            panic!("bad line from cyclone_cdr.py: {line}")
        };
        let o = fixed_sample(name).unwrap_or_else(|| panic!("sample {name} has no Rust twin"));
        let data_ours = if endian == "le" { &o.le } else { &o.be };
        assert_eq!(
            data_ours, data,
            "{name} {endian}: data differs (ours first)"
        );
        assert_eq!(o.key, key, "{name}: big-endian key differs (ours first)");
        if o.has_key {
            assert_eq!(
                o.key_hash, key_hash,
                "{name}: key hash differs (ours first)"
            );
        }
        compared += 1;
    }
    assert!(compared >= 30, "only {compared} encodings compared");
    println!("compared {compared} encodings with Cyclone DDS");
}

fn point() -> impl Strategy<Value = Point> {
    (any::<i16>(), any::<i64>()).prop_map(|(x, y)| Point { x, y })
}

fn finite_f64() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite (NaN has many encodings)", |f| f.is_finite())
}

fn sample() -> impl Strategy<Value = Sample> {
    let reading = prop_oneof![
        any::<i32>().prop_map(Reading::Count),
        (2i16..=3, finite_f64()).prop_map(|(d, v)| Reading::Level(d, v)),
        "[a-zA-Z0-9 ]{0,8}".prop_map(Reading::Note),
        (
            any::<i16>().prop_filter("named label", |d| !(1..=4).contains(d)),
            any::<u8>()
        )
            .prop_map(|(d, v)| Reading::Raw(d, v)),
    ];
    let color = prop_oneof![Just(Color::Red), Just(Color::Green), Just(Color::Blue)];
    (
        any::<u32>(),
        proptest::char::range(' ', '~'),
        "[ -~]{0,8}",
        color,
        point(),
        proptest::array::uniform3(finite_f64()),
        proptest::collection::vec(point(), 0..=4),
        reading,
        any::<bool>(),
    )
        .prop_map(
            |(id, tag, name, color, origin, coords, path, reading, ok)| Sample {
                id,
                tag,
                name,
                color,
                origin,
                coords,
                path,
                reading,
                ok,
            },
        )
}

fn finite_f32() -> impl Strategy<Value = f32> {
    any::<f32>().prop_filter("finite (NaN has many encodings)", |f| f.is_finite())
}

fn geo_point() -> impl Strategy<Value = av::GeoPoint> {
    (finite_f64(), finite_f64(), finite_f32()).prop_map(|(la, lo, al)| av::GeoPoint {
        latitude_deg: la,
        longitude_deg: lo,
        altitude_m: al,
    })
}

fn vector3() -> impl Strategy<Value = [f32; 3]> {
    proptest::array::uniform3(finite_f32())
}

fn waypoint() -> impl Strategy<Value = av::Waypoint> {
    let kind = prop_oneof![
        Just(av::WaypointKind::Fix),
        Just(av::WaypointKind::Vor),
        Just(av::WaypointKind::Ndb),
        Just(av::WaypointKind::Airport),
        Just(av::WaypointKind::UserDefined),
    ];
    let constraint = prop_oneof![
        finite_f32().prop_map(av::Constraint::AltitudeM),
        finite_f32().prop_map(av::Constraint::SpeedMps),
        any::<u64>().prop_map(av::Constraint::EtaNs),
        Just(av::Constraint::Unselected(av::ConstraintKind::NoConstraint)),
    ];
    ("[A-Z0-9]{0,5}", kind, geo_point(), constraint).prop_map(
        |(name, kind, position, constraint)| av::Waypoint {
            name,
            kind,
            position,
            constraint,
        },
    )
}

/// Every avionics topic type, encoded by us: (registered type name, our view).
fn avionics_cases(runner: &mut TestRunner) -> Vec<(&'static str, Ours)> {
    let mut cases: Vec<(&'static str, Ours)> = Vec::new();
    let air_data = (
        any::<u32>(),
        any::<u64>(),
        proptest::array::uniform6(finite_f32()),
        0u32..3,
    )
        .prop_map(|(id, t, f, r)| av::AirData {
            aircraft_id: id,
            timestamp_ns: t,
            indicated_airspeed_mps: f[0],
            true_airspeed_mps: f[1],
            mach: f[2],
            pressure_altitude_m: f[3],
            vertical_speed_mps: f[4],
            static_air_temperature_k: f[5],
            altitude_reference: [
                av::AltitudeReference::Barometric,
                av::AltitudeReference::Geometric,
                av::AltitudeReference::Radio,
            ][r as usize],
        });
    for v in generate(air_data, runner) {
        cases.push((av::AirData::TYPE_NAME, ours(&v)));
    }
    let attitude = (
        any::<u32>(),
        any::<u64>(),
        proptest::array::uniform3(finite_f64()),
        vector3(),
    )
        .prop_map(|(id, t, a, r)| av::Attitude {
            aircraft_id: id,
            timestamp_ns: t,
            roll_rad: a[0],
            pitch_rad: a[1],
            heading_rad: a[2],
            body_rates_radps: r,
        });
    for v in generate(attitude, runner) {
        cases.push((av::Attitude::TYPE_NAME, ours(&v)));
    }
    let phases = [
        av::FlightPhase::Preflight,
        av::FlightPhase::Taxi,
        av::FlightPhase::Takeoff,
        av::FlightPhase::Climb,
        av::FlightPhase::Cruise,
        av::FlightPhase::Descent,
        av::FlightPhase::Approach,
        av::FlightPhase::Landing,
    ];
    let nav = (
        any::<u32>(),
        any::<u64>(),
        geo_point(),
        vector3(),
        finite_f32(),
        any::<bool>(),
        0usize..8,
    )
        .prop_map(
            move |(id, t, position, v, acc, ok, phase)| av::NavigationPosition {
                aircraft_id: id,
                timestamp_ns: t,
                position,
                velocity_ned_mps: v,
                horizontal_accuracy_m: acc,
                gnss_valid: ok,
                phase: phases[phase],
            },
        );
    for v in generate(nav, runner) {
        cases.push((av::NavigationPosition::TYPE_NAME, ours(&v)));
    }
    let plan = (
        any::<u32>(),
        "[A-Z0-9]{0,8}",
        "[A-Z]{0,4}",
        "[A-Z]{0,4}",
        any::<u16>(),
        proptest::collection::vec(waypoint(), 0..=6),
    )
        .prop_map(
            |(id, callsign, origin, destination, revision, route)| av::FlightPlan {
                aircraft_id: id,
                callsign,
                origin,
                destination,
                revision,
                route,
            },
        );
    for v in generate(plan, runner) {
        cases.push((av::FlightPlan::TYPE_NAME, ours(&v)));
    }
    let sources = [
        av::TrackSource::PrimaryRadar,
        av::TrackSource::SecondaryRadar,
        av::TrackSource::Adsb,
        av::TrackSource::Fused,
    ];
    let identity = prop_oneof![
        any::<u32>().prop_map(av::TrackIdentity::IcaoAddress),
        (2i16..=3, "[A-Z0-9]{0,8}").prop_map(|(d, c)| av::TrackIdentity::Callsign(d, c)),
        (
            any::<i16>().prop_filter("named label", |d| !(1..=3).contains(d)),
            any::<u16>()
        )
            .prop_map(|(d, c)| av::TrackIdentity::ModeACode(d, c)),
    ];
    let track = (
        (
            any::<u16>(),
            any::<u32>(),
            any::<u64>(),
            0usize..4,
            identity,
        ),
        (
            geo_point(),
            vector3(),
            proptest::array::uniform3(vector3()),
            any::<u8>(),
            any::<i64>(),
        ),
    )
        .prop_map(
            move |((sensor, track, t, source, identity), (p, v, cov, q, off))| av::TrackReport {
                sensor_id: sensor,
                track_id: track,
                timestamp_ns: t,
                source: sources[source],
                identity,
                position: p,
                velocity_ned_mps: v,
                position_covariance_m2: cov,
                quality: q,
                clock_offset_ns: off,
            },
        );
    for v in generate(track, runner) {
        cases.push((av::TrackReport::TYPE_NAME, ours(&v)));
    }
    let statuses = [
        av::HealthStatus::Nominal,
        av::HealthStatus::Degraded,
        av::HealthStatus::Failed,
        av::HealthStatus::Offline,
    ];
    let heartbeat = (
        any::<u32>(),
        "[ -~]{0,16}",
        any::<u32>(),
        0usize..4,
        proptest::char::range(' ', '~'),
        any::<i16>(),
        "[ -~]{0,64}",
        proptest::collection::vec(any::<u32>(), 0..10),
    )
        .prop_map(
            move |(id, subsystem, n, status, code, temp, detail, faults)| av::HealthHeartbeat {
                aircraft_id: id,
                subsystem,
                sequence_number: n,
                status: statuses[status],
                severity_code: code,
                temperature_c: temp,
                detail,
                fault_codes: faults,
            },
        );
    for v in generate(heartbeat, runner) {
        cases.push((av::HealthHeartbeat::TYPE_NAME, ours(&v)));
    }
    cases
}

fn generate<S: Strategy>(s: S, runner: &mut TestRunner) -> Vec<S::Value> {
    (0..RANDOM_SAMPLES_PER_TYPE)
        .map(|_| s.new_tree(runner).unwrap().current())
        .collect()
}

#[test]
fn random_samples_survive_cyclone_decode_and_reencode() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&SEED.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
    );
    println!("seed {SEED:#x}");

    // (type name, our data, our key, our key hash, has key)
    let mut cases: Vec<(&str, Ours)> = Vec::new();
    for v in generate(sample(), &mut runner) {
        cases.push((Sample::TYPE_NAME, ours(&v)));
    }
    let extras = (
        any::<u8>(),
        proptest::option::of(any::<i32>()),
        proptest::option::of("[a-z]{0,4}"),
        proptest::option::of(finite_f64()),
        any::<u8>(),
    )
        .prop_map(|(head, a, b, c, tail)| Extras {
            head,
            a,
            b,
            c,
            tail,
        });
    for v in generate(extras, &mut runner) {
        cases.push((Extras::TYPE_NAME, ours(&v)));
    }
    for (key, value) in generate((".{0,24}", ".{0,24}"), &mut runner) {
        cases.push((KeyedString::TYPE_NAME, ours(&KeyedString { key, value })));
    }
    for payload in generate(proptest::collection::vec(any::<u8>(), 0..300), &mut runner) {
        cases.push((Sequence::TYPE_NAME, ours(&Sequence { payload })));
    }
    cases.extend(avionics_cases(&mut runner));

    let mut input = String::new();
    for (name, o) in &cases {
        input.push_str(&format!("{name} {}\n{name} {}\n", o.le, o.be));
    }
    let mut child = Command::new(&python)
        .arg(crosscheck_dir().join("cyclone_cdr.py"))
        .arg("reencode")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run cyclone_cdr.py");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * cases.len(), "one answer per encoding");

    for (i, (name, o)) in cases.iter().enumerate() {
        for (j, data) in [&o.le, &o.be].into_iter().enumerate() {
            let line = lines[2 * i + j];
            let f: Vec<&str> = line.split(' ').collect();
            let ["ok", back, key, key_hash] = f[..] else {
                panic!("seed {SEED:#x}: Cyclone rejected our {name} {data}: {line}")
            };
            assert_eq!(
                back, data,
                "seed {SEED:#x}: {name} re-encoded differently (ours first)"
            );
            assert_eq!(key, o.key, "seed {SEED:#x}: {name} {data}: key differs");
            if o.has_key {
                assert_eq!(
                    key_hash, o.key_hash,
                    "seed {SEED:#x}: {name} {data}: key hash"
                );
            }
        }
    }
    println!(
        "{} encodings round-tripped through Cyclone DDS",
        2 * cases.len()
    );
}
