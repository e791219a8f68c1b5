//! Bad input is an error naming the member path, never a panic: malformed JSON, unknown
//! or missing members, wrong kinds, out-of-range numbers, over-bound strings and
//! sequences, inconsistent unions, unknown types, and arbitrary bytes to decode.

use std::path::Path;

use proptest::prelude::*;
use spindle_dynamic::{DynType, Error};
use spindle_topics::Endianness;

fn avionics(name: &str) -> DynType {
    DynType::from_idl_file(
        Path::new("../topics/idl/avionics.idl"),
        &[] as &[&str],
        name,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn err(t: &DynType, json: &str) -> String {
    match t.encode_json_str(json, Endianness::Little) {
        Ok(s) => panic!("{json} encoded to {:?}", s.bytes),
        Err(e) => e.to_string(),
    }
}

const PLAN: &str = r#"{"aircraft_id": 1, "callsign": "SPN1", "origin": "LFPG", "destination": "KJFK",
  "revision": 2, "route": [{"name": "ABCDE", "kind": "FIX",
  "position": {"latitude_deg": 1.5, "longitude_deg": 2.5, "altitude_m": 3.0},
  "constraint": {"discriminator": "ALTITUDE", "altitude_m": 100.0}}]}"#;

#[test]
fn a_good_sample_encodes() {
    let t = avionics("Avionics::FlightPlan");
    let s = t.encode_json_str(PLAN, Endianness::Big).expect("encodes");
    let back = t.decode_json(&s.bytes).expect("decodes");
    assert_eq!(back["route"][0]["constraint"]["altitude_m"], 100.0);
    assert_eq!(back["callsign"], "SPN1");
}

/// Marks a case whose first string is the whole JSON text.
const WHOLE: &str = "<whole>";

#[test]
fn json_errors_name_the_member_path() {
    let t = avionics("Avionics::FlightPlan");
    let cases: &[(&str, &str, &str)] = &[
        ("{\"aircraft_id\": ", WHOLE, "malformed JSON"),
        ("\"AAAA\"", WHOLE, "Avionics::FlightPlan: expected an object (Avionics::FlightPlan), found a string"),
        (r#""aircraft_id": 1"#, r#""aircraft_id": 1, "wings": 2"#, "Avionics::FlightPlan: Avionics::FlightPlan has no member `wings`"),
        (r#""aircraft_id": 1, "#, "", "Avionics::FlightPlan.aircraft_id: missing member"),
        (r#""aircraft_id": 1"#, r#""aircraft_id": -1"#, "Avionics::FlightPlan.aircraft_id: -1 is out of range for unsigned long"),
        (r#""aircraft_id": 1"#, r#""aircraft_id": 4294967296"#, "out of range for unsigned long"),
        (r#""aircraft_id": 1"#, r#""aircraft_id": 1.5"#, "Avionics::FlightPlan.aircraft_id: expected an integer"),
        (r#""revision": 2"#, r#""revision": "2""#, "Avionics::FlightPlan.revision: expected an integer (unsigned short), found a string"),
        (r#""callsign": "SPN1""#, r#""callsign": "SPINDLE99""#, "Avionics::FlightPlan.callsign: string of 9 bytes, its bound is 8"),
        (r#""name": "ABCDE""#, r#""name": "ABCDEF""#, "Avionics::FlightPlan.route[0].name: string of 6 bytes, its bound is 5"),
        (r#""kind": "FIX""#, r#""kind": "FIXX""#, "Avionics::FlightPlan.route[0].kind: Avionics::WaypointKind has no enumerator \"FIXX\""),
        (r#""altitude_m": 3.0"#, r#""altitude_m": 1e300"#, "Avionics::FlightPlan.route[0].position.altitude_m: 1e300 is out of range for float"),
        (r#""discriminator": "ALTITUDE""#, r#""discriminator": "SPEED""#, "Avionics::FlightPlan.route[0].constraint: discriminator 2 selects `speed_mps`, not `altitude_m`"),
        (r#""discriminator": "ALTITUDE""#, r#""discriminator": "NO_CONSTRAINT""#, "selects no member, but `altitude_m` is given"),
        (r#""altitude_m": 100.0"#, r#""altitude_m": 100.0, "speed_mps": 1"#, "holds one member, not several"),
    ];
    for (from, to, want) in cases {
        let json = if *to == WHOLE {
            from.to_string()
        } else {
            assert!(PLAN.contains(from), "{from}");
            PLAN.replacen(from, to, 1)
        };
        let got = err(&t, &json);
        assert!(got.contains(want), "{json}\n  gave: {got}\n  want: {want}");
    }
}

#[test]
fn sequence_bounds_and_array_lengths_are_checked() {
    let t = avionics("Avionics::FlightPlan");
    let wp = r#"{"name": "A", "kind": "FIX", "position": {"latitude_deg": 0, "longitude_deg": 0, "altitude_m": 0}, "constraint": {"discriminator": "NO_CONSTRAINT"}}"#;
    let route = vec![wp; 33].join(",");
    let json = format!(
        r#"{{"aircraft_id": 1, "callsign": "", "origin": "", "destination": "", "revision": 0, "route": [{route}]}}"#
    );
    assert!(err(&t, &json)
        .contains("Avionics::FlightPlan.route: sequence of 33 elements, its bound is 32"));
    let a = avionics("Avionics::Attitude");
    let json = r#"{"aircraft_id": 1, "timestamp_ns": 0, "roll_rad": 0, "pitch_rad": 0, "heading_rad": 0, "body_rates_radps": [1, 2]}"#;
    assert!(err(&a, json).contains(
        "Avionics::Attitude.body_rates_radps: array of 2 elements, the type has exactly 3"
    ));
    let h = avionics("Avionics::HealthHeartbeat");
    let json = r#"{"aircraft_id": 1, "subsystem": "x", "sequence_number": 0, "status": "NOMINAL", "severity_code": "é", "temperature_c": 0, "detail": "", "fault_codes": []}"#;
    assert!(err(&h, json).contains(
        "Avionics::HealthHeartbeat.severity_code: 'é' is not a one-byte (ASCII) IDL char"
    ));
}

#[test]
fn unknown_types_and_non_structs_are_refused_by_name() {
    let idl = Path::new("../topics/idl/avionics.idl");
    let e = DynType::from_idl_file(idl, &[] as &[&str], "Avionics::Nope").unwrap_err();
    assert!(matches!(e, Error::UnknownType { .. }), "{e}");
    assert!(e.to_string().contains("Avionics::AirData"), "{e}");
    let e = DynType::from_idl_file(idl, &[] as &[&str], "Avionics::Constraint").unwrap_err();
    assert_eq!(
        e.to_string(),
        "`Avionics::Constraint` is a union, not a struct: a topic's type is a struct"
    );
    let e = DynType::from_idl_file(Path::new("no/such.idl"), &[] as &[&str], "X").unwrap_err();
    assert!(e.to_string().contains("file not found"), "{e}");
}

#[test]
fn truncated_and_corrupt_bytes_are_decode_errors() {
    let t = avionics("Avionics::FlightPlan");
    let s = t
        .encode_json_str(PLAN, Endianness::Little)
        .expect("encodes");
    for n in 0..s.bytes.len() {
        assert!(
            t.decode_json(&s.bytes[..n]).is_err(),
            "a prefix of {n} bytes decoded"
        );
    }
    let mut bad = s.bytes.clone();
    bad[4 + 4 + 4] = 0xff; // the callsign's length
    let e = t.decode_json(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with("Avionics::FlightPlan.callsign: cannot decode at byte"),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]
    /// Arbitrary bytes after a valid header never panic the decoder.
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256), big in any::<bool>()) {
        let t = avionics("Avionics::FlightPlan");
        let mut bytes = if big { vec![0, 0, 0, 0] } else { vec![0, 1, 0, 0] };
        bytes.extend_from_slice(&body);
        let _ = t.decode_json(&bytes);
    }

    /// Arbitrary mutations of a valid sample never panic the decoder, and whatever
    /// decodes re-encodes.
    #[test]
    fn mutated_samples_never_panic(at in 0usize..400, byte in any::<u8>(), seed in any::<u64>()) {
        let t = DynType::from_idl_file(
            Path::new("../idl/tests/corpus/valid/everything.idl"),
            &["../idl/tests/corpus/valid"],
            "Everything::Everything",
        ).expect("type");
        let v = t.random_json(seed).unwrap();
        let mut bytes = t.encode_json(&v, Endianness::Little).expect("encodes").bytes;
        let at = at % bytes.len();
        bytes[at] = byte;
        if let Ok(j) = t.decode_json(&bytes) {
            prop_assert!(t.encode_json(&j, Endianness::Little).is_ok(), "{}", j);
        }
    }
}

/// `wstring` dynamically: the same bytes as the generated code's `WString` (a byte
/// length, UTF-16 code units, no terminator), its bound counted in code units, and bad
/// bytes refused with the member named.
#[test]
fn wstrings_are_utf16_with_a_byte_length() {
    let t = DynType::from_idl_source("w.idl", "struct W { wstring<3> w; };", "W").unwrap();
    let s = t
        .encode_json(&serde_json::json!({"w": "é😀"}), Endianness::Little)
        .unwrap();
    assert_eq!(
        s.bytes,
        [0, 1, 0, 0, 6, 0, 0, 0, 0xe9, 0, 0x3d, 0xd8, 0x00, 0xde]
    );
    assert_eq!(t.decode_json(&s.bytes).unwrap()["w"], "é😀");
    let e = t
        .encode_json(&serde_json::json!({"w": "😀😀"}), Endianness::Little)
        .unwrap_err();
    assert!(e.to_string().contains("W.w"), "{e}");
    assert!(
        e.to_string()
            .contains("4 UTF-16 code units, its bound is 3"),
        "{e}"
    );
    for bad in [
        &[0, 1, 0, 0, 3, 0, 0, 0, 0xe9, 0, 0][..],
        &[0, 1, 0, 0, 2, 0, 0, 0, 0x3d, 0xd8][..],
        &[0, 1, 0, 0, 8, 0, 0, 0, 0x41, 0, 0x41, 0, 0x41, 0, 0x41, 0][..],
    ] {
        let e = t.decode_json(bad).unwrap_err();
        assert!(e.to_string().contains("W.w"), "{e}");
    }
}

/// `key_json` keeps exactly the key members, nested as in the type (what names an
/// instance, e.g. in `spindle sub`'s line for a dispose notice), and `Null` for a keyless
/// type.
#[test]
fn key_json_keeps_the_key_members_only() {
    let idl = "module T { struct Id { @key long a; long b; }; \
               struct S { @key Id id; @key short n; string note; }; \
               struct K { long x; }; };";
    let t = DynType::from_idl_source("k.idl", idl, "T::S").unwrap();
    let v = serde_json::json!({"id": {"a": 1, "b": 2}, "n": 3, "note": "x"});
    let k = t.key_json(&v);
    assert_eq!(k["n"], 3, "{k}");
    assert_eq!(k["id"]["a"], 1, "{k}");
    assert!(k.get("note").is_none(), "{k}");
    let keyless = DynType::from_idl_source("k.idl", idl, "T::K").unwrap();
    assert_eq!(
        keyless.key_json(&serde_json::json!({"x": 1})),
        serde_json::Value::Null
    );
}
