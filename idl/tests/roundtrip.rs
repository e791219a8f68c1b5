//! Round trips of generated types (encode → decode → equal, both byte orders, key hash
//! stable, size bounds honoured) for every type generated from the corpus and from the
//! avionics model; and byte-for-byte equality with the hand-written reference in
//! `spindle_topics::builtin::examples`. The generated code is the golden output the corpus
//! test checks, `include!`d here.

#[allow(dead_code)]
mod gen_everything {
    include!("corpus/valid/everything.rs");
}

#[allow(dead_code)]
mod gen_example {
    include!("corpus/valid/example.rs");
}

#[allow(dead_code)]
mod gen_shadowing {
    include!("corpus/valid/shadowing.rs");
}

#[allow(dead_code)]
mod gen_avionics {
    include!("corpus/external/avionics.rs");
}

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use spindle_topics::cdr::{WChar, WString};
use spindle_topics::{Endianness, Error, TopicType};

use gen_avionics::avionics as av;
use gen_everything::common::Stamp;
use gen_everything::everything as ev;
use gen_example::example as ex;

const CASES: u32 = 256;

fn config() -> ProptestConfig {
    // Seeded through proptest's own persistence; failures print the minimal input.
    ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    }
}

/// Encode → decode → equal in both byte orders; bounded sizes and the key hash hold.
fn round_trip<T: TopicType + PartialEq + std::fmt::Debug>(v: &T) -> Result<(), TestCaseError> {
    for e in [Endianness::Little, Endianness::Big] {
        let bytes = v
            .encode(e)
            .map_err(|err| TestCaseError::fail(format!("{err}")))?;
        if let Some(max) = T::MAX_SERIALIZED_SIZE {
            prop_assert!(bytes.len() <= max, "{} bytes > max {max}", bytes.len());
        }
        let back = T::decode(&bytes).map_err(|err| TestCaseError::fail(format!("{err}")))?;
        prop_assert_eq!(&back, v);
        // encode_into an exactly sized buffer gives the same bytes.
        let mut buf = vec![0u8; bytes.len()];
        let n = v
            .encode_into(e, &mut buf)
            .map_err(|err| TestCaseError::fail(format!("{err}")))?;
        prop_assert_eq!(&buf[..n], &bytes[..]);
        prop_assert_eq!(back.key_hash().ok(), v.key_hash().ok());
    }
    let mut key = Vec::new();
    v.encode_key_be(&mut key)
        .map_err(|err| TestCaseError::fail(format!("{err}")))?;
    if let Some(max) = T::KEY_MAX_SERIALIZED_SIZE {
        prop_assert!(key.len() <= max, "key {} bytes > max {max}", key.len());
    }
    prop_assert_eq!(key.is_empty(), !T::HAS_KEY);
    Ok(())
}

fn f32s() -> impl Strategy<Value = f32> {
    prop::num::f32::NORMAL
        | prop::num::f32::ZERO
        | prop::num::f32::SUBNORMAL
        | prop::num::f32::INFINITE
}

fn f64s() -> impl Strategy<Value = f64> {
    prop::num::f64::NORMAL
        | prop::num::f64::ZERO
        | prop::num::f64::SUBNORMAL
        | prop::num::f64::INFINITE
}

fn ascii() -> impl Strategy<Value = char> {
    prop::char::range('\0', '\x7f')
}

fn wchar() -> impl Strategy<Value = WChar> {
    prop_oneof![
        prop::char::range('\0', '\u{d7ff}'),
        prop::char::range('\u{e000}', '\u{ffff}')
    ]
    .prop_map(WChar)
}

/// A `wstring` of at most `units` UTF-16 code units: any characters, surrogate pairs too.
fn wstr(units: usize) -> impl Strategy<Value = WString> {
    prop::collection::vec(any::<char>(), 0..=units).prop_map(move |cs| {
        let mut s = String::new();
        let mut n = 0;
        for c in cs {
            if n + c.len_utf16() > units {
                break;
            }
            n += c.len_utf16();
            s.push(c);
        }
        WString(s)
    })
}

/// Strings of at most `max` bytes (no NUL: CDR strings are NUL-terminated).
fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::char::range('\u{1}', '\u{7ff}'), 0..=max).prop_map(move |cs| {
        let mut s = String::new();
        for c in cs {
            if s.len() + c.len_utf8() <= max {
                s.push(c);
            }
        }
        s
    })
}

// ---- everything.idl ---------------------------------------------------------------------

fn ev_color() -> impl Strategy<Value = ev::Color> {
    prop_oneof![
        Just(ev::Color::Red),
        Just(ev::Color::Green),
        Just(ev::Color::Blue)
    ]
}

fn ev_level() -> impl Strategy<Value = ev::Level> {
    prop_oneof![
        Just(ev::Level::Low),
        Just(ev::Level::Mid),
        Just(ev::Level::High)
    ]
}

fn ev_point() -> impl Strategy<Value = ev::inner::Point> {
    (any::<i16>(), any::<i64>()).prop_map(|(x, y)| ev::inner::Point { x, y })
}

fn ev_by_short() -> impl Strategy<Value = ev::ByShort> {
    prop_oneof![
        any::<i32>().prop_map(ev::ByShort::Count),
        (prop_oneof![Just(2i16), Just(3)], f64s()).prop_map(|(d, v)| ev::ByShort::Level(d, v)),
        text(12).prop_map(ev::ByShort::Note),
        (
            any::<i16>().prop_filter("not a named label", |d| !matches!(d, 1 | 2 | 3 | -4)),
            any::<u8>()
        )
            .prop_map(|(d, v)| ev::ByShort::Raw(d, v)),
    ]
}

fn ev_by_enum() -> impl Strategy<Value = ev::ByEnum> {
    prop_oneof![
        ev_point().prop_map(ev::ByEnum::RedPoint),
        prop::collection::vec(ev_color(), 0..=2).prop_map(ev::ByEnum::Greens),
        Just(ev::ByEnum::Unselected(ev::Color::Blue)),
    ]
}

fn ev_by_char() -> impl Strategy<Value = ev::ByChar> {
    prop_oneof![
        ascii().prop_map(ev::ByChar::Letter),
        wchar().prop_map(ev::ByChar::Wide),
        ascii()
            .prop_filter("unnamed", |c| *c != 'a' && *c != 'b')
            .prop_map(ev::ByChar::Unselected),
    ]
}

fn ev_by_bool() -> impl Strategy<Value = ev::ByBool> {
    prop_oneof![
        any::<u64>().prop_map(ev::ByBool::Yes),
        text(3).prop_map(ev::ByBool::No)
    ]
}

fn ev_by_octet() -> impl Strategy<Value = ev::ByOctet> {
    prop_oneof![
        f32s().prop_map(ev::ByOctet::NothingMuch),
        (1u8.., any::<[[i32; 3]; 2]>()).prop_map(|(d, g)| ev::ByOctet::Grid(d, g)),
    ]
}

fn ev_node() -> impl Strategy<Value = ev::Node> {
    let leaf = any::<i32>().prop_map(|value| ev::Node {
        value,
        children: Vec::new(),
    });
    leaf.prop_recursive(3, 12, 3, |inner| {
        (any::<i32>(), prop::collection::vec(inner, 0..3))
            .prop_map(|(value, children)| ev::Node { value, children })
    })
}

fn ev_keyed() -> impl Strategy<Value = ev::inner::Keyed> {
    (any::<i16>(), ascii(), any::<i32>()).prop_map(|(a, b, c)| ev::inner::Keyed { a, b, c })
}

fn stamp() -> impl Strategy<Value = Stamp> {
    (any::<u64>(), any::<u32>()).prop_map(|(sec, nanosec)| Stamp { sec, nanosec })
}

#[allow(clippy::type_complexity)]
fn ev_everything() -> impl Strategy<Value = ev::Everything> {
    let a = (
        any::<u32>(),
        text(20),
        ev_keyed(),
        ev_point(),
        any::<bool>(),
        any::<u8>(),
        ascii(),
        wchar(),
        any::<(i8, u8, i16, u16)>(),
        any::<(i32, u32, i64, u64)>(),
        any::<(i16, u16, i32, u32, i64, u64)>(),
        (f32s(), f64s()),
    );
    let b = (
        text(8),
        text(3),
        prop::collection::vec(any::<u8>(), 0..40),
        prop::collection::vec(any::<u8>(), 0..=16),
        prop::collection::vec(any::<i32>(), 0..=4),
        prop::collection::vec(prop::collection::vec(text(2), 0..=2), 0..3),
        (f64s(), f64s(), f64s()),
        any::<[[i32; 3]; 2]>(),
        [[ev_point(), ev_point()], [ev_point(), ev_point()]],
        prop::collection::vec(any::<u8>(), 40),
        ev_color(),
        ev_level(),
    );
    let c = (
        ev_by_short(),
        ev_by_enum(),
        ev_by_char(),
        ev_by_bool(),
        ev_by_octet(),
        ev_node(),
        stamp(),
        proptest::option::of(any::<i32>()),
        proptest::option::of(text(4)),
        proptest::option::of(ev_point()),
        any::<i32>(),
        (wstr(20), wstr(4), prop::collection::vec(wstr(5), 0..=2)),
    );
    (a, b, c).prop_map(|(a, b, c)| ev::Everything {
        id: a.0,
        name: a.1,
        inner_key: a.2,
        point_key: a.3,
        flag: a.4,
        byte_value: a.5,
        ch: a.6,
        wch: a.7,
        wide: c.11 .0,
        wide_short: c.11 .1,
        wide_list: c.11 .2,
        i8v: a.8 .0,
        u8v: a.8 .1,
        i16v: a.8 .2,
        u16v: a.8 .3,
        i32v: a.9 .0,
        u32v: a.9 .1,
        i64v: a.9 .2,
        u64v: a.9 .3,
        s: a.10 .0,
        us: a.10 .1,
        l: a.10 .2,
        ul: a.10 .3,
        ll: a.10 .4,
        ull: a.10 .5,
        f: a.11 .0,
        d: a.11 .1,
        bounded_name: b.0,
        tag: b.1,
        blob: b.2,
        small_blob: b.3,
        shorts: b.4,
        nested_seq: b.5,
        coords: [b.6 .0, b.6 .1, b.6 .2],
        matrix: b.7,
        points: b.8,
        long_array: b.9.try_into().unwrap_or([0; 40]),
        color: b.10,
        level: b.11,
        by_short: c.0,
        by_enum: c.1,
        by_char: c.2,
        by_bool: c.3,
        by_octet: c.4,
        tree: c.5,
        stamp: c.6,
        maybe_long: c.7,
        maybe_name: c.8,
        maybe_point: c.9,
        r#type: c.10,
    })
}

fn ev_bounded() -> impl Strategy<Value = ev::Bounded> {
    (
        text(16),
        prop::collection::vec(ev_point(), 0..=3),
        ev_by_short(),
        [ev_color(), ev_color()],
        wstr(3),
        proptest::option::of(f64s()),
    )
        .prop_map(
            |(label, path, reading, colors, wide_label, extra)| ev::Bounded {
                label,
                path,
                reading,
                colors,
                wide_label,
                extra,
            },
        )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn everything_round_trips(v in ev_everything()) {
        round_trip(&v)?;
    }

    #[test]
    fn bounded_round_trips(v in ev_bounded()) {
        round_trip(&v)?;
    }

    #[test]
    fn small_types_round_trip(
        p in ev_point(),
        k in ev_keyed(),
        n in ev_node(),
        s in stamp(),
        base in (any::<u32>(), text(10)),
        c in ev_color(),
    ) {
        round_trip(&p)?;
        round_trip(&k)?;
        round_trip(&n)?;
        round_trip(&s)?;
        round_trip(&ev::Base { id: base.0, name: base.1 })?;
        round_trip(&ev::Reopened { c })?;
    }

    /// Over-long bounded members are refused on encode, never truncated or panicking.
    #[test]
    fn bounds_are_checked_on_encode(v in ev_bounded(), extra in 1usize..8) {
        let mut long = v.clone();
        long.label = "x".repeat(16 + extra);
        let is_bound_error = matches!(long.encode(Endianness::Little), Err(Error::BoundExceeded { max: 16, .. }));
        prop_assert!(is_bound_error);
        let mut long = v.clone();
        long.path = vec![ev::inner::Point { x: 0, y: 0 }; 3 + extra];
        let is_bound_error = matches!(long.encode(Endianness::Big), Err(Error::BoundExceeded { max: 3, .. }));
        prop_assert!(is_bound_error);
        let mut long = v;
        long.reading = ev::ByShort::Note("n".repeat(12 + extra));
        let is_bound_error = matches!(long.encode(Endianness::Big), Err(Error::BoundExceeded { max: 12, .. }));
        prop_assert!(is_bound_error);
    }

    /// A union value whose discriminator does not select its branch is refused.
    #[test]
    fn inconsistent_union_discriminators_are_refused(v in ev_bounded(), d in any::<i16>()) {
        let mut bad = v.clone();
        bad.reading = ev::ByShort::Level(d, 1.0);
        let r = bad.encode(Endianness::Little);
        prop_assert_eq!(r.is_ok(), d == 2 || d == 3);
        let mut bad = v;
        bad.reading = ev::ByShort::Raw(d, 1);
        let r = bad.encode(Endianness::Little);
        prop_assert_eq!(r.is_ok(), !matches!(d, 1 | 2 | 3 | -4));
    }

    /// Decoding random bytes never panics.
    #[test]
    fn decoding_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = ev::Everything::decode(&bytes);
        let _ = ev::Bounded::decode(&bytes);
        let _ = av::FlightPlan::decode(&bytes);
        let _ = av::TrackReport::decode(&bytes);
    }
}

#[test]
fn keys_cover_nested_key_members() {
    // Everything's keys: id (base), inner_key's keys a and b (not c), and all of point_key.
    let mut v = ev::Everything::decode(&ev_default_bytes()).expect("decode");
    v.id = 0x0102_0304;
    v.inner_key = ev::inner::Keyed {
        a: 0x0506,
        b: 'z',
        c: 99,
    };
    v.point_key = ev::inner::Point { x: 7, y: -1 };
    let mut key = Vec::new();
    v.encode_key_be(&mut key).expect("key");
    assert_eq!(
        key,
        [
            1, 2, 3, 4, // id
            5, 6,    // a
            b'z', // b
            0,    // pad to 2 for x
            0, 7, // x
            0, 0, 0, 0, 0, 0, // pad to 8 for y
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // y
        ]
    );
    // c is not a key: changing it keeps the key hash.
    let h = v.key_hash().expect("hash");
    v.inner_key.c = 1;
    assert_eq!(v.key_hash().expect("hash"), h);
    assert_eq!(
        <ev::Everything as TopicType>::TYPE_NAME,
        "Everything::Everything"
    );
    assert_eq!(
        <ev::inner::Keyed as TopicType>::TYPE_NAME,
        "Everything::Inner::Keyed"
    );
    assert_eq!(<ev::Everything as TopicType>::MAX_SERIALIZED_SIZE, None);
    assert_eq!(
        <ev::Everything as TopicType>::KEY_MAX_SERIALIZED_SIZE,
        Some(24)
    );
    let has_key = <ev::Reopened as TopicType>::HAS_KEY;
    assert!(!has_key);
}

/// A valid encoding of a default-ish Everything, built by hand from a value.
fn ev_default_bytes() -> Vec<u8> {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let v = ev_everything()
        .new_tree(&mut runner)
        .expect("tree")
        .current();
    v.encode(Endianness::Little).expect("encode")
}

#[test]
fn constants_keep_their_values() {
    assert_eq!(ev::SHIFTED, 19);
    assert_eq!(ev::BIG, -4_294_967_296);
    assert_eq!(ev::MASK, 255);
    assert_eq!(ev::HALF, 0.5);
    assert_eq!(ev::SCALE, 25.0);
    assert_eq!(ev::LETTER, 'x');
    const { assert!(ev::ENABLED) };
    assert_eq!(ev::GREETING, "hi\tthere");
    assert_eq!(ev::SMALL_OCTET, 1);
    assert_eq!(ev::DERIVED, 31);
    assert_eq!(ev::FAVOURITE, ev::Color::Blue);
    assert_eq!(ev::Color::Blue as u32, 7);
    assert_eq!(av::DETAIL_MAX, 64);
}

// ---- the hand-written reference ------------------------------------------------------------

mod reference {
    pub use spindle_topics::builtin::examples::*;
}

fn ex_reading() -> impl Strategy<Value = (ex::Reading, reference::Reading)> {
    prop_oneof![
        any::<i32>().prop_map(|v| (ex::Reading::Count(v), reference::Reading::Count(v))),
        (prop_oneof![Just(2i16), Just(3)], f64s())
            .prop_map(|(d, v)| (ex::Reading::Level(d, v), reference::Reading::Level(d, v))),
        text(8).prop_map(|v| (ex::Reading::Note(v.clone()), reference::Reading::Note(v))),
        (
            any::<i16>().prop_filter("unnamed", |d| !(1..=4).contains(d)),
            any::<u8>()
        )
            .prop_map(|(d, v)| (ex::Reading::Raw(d, v), reference::Reading::Raw(d, v))),
    ]
}

fn ex_color() -> impl Strategy<Value = (ex::Color, reference::Color)> {
    prop_oneof![
        Just((ex::Color::Red, reference::Color::Red)),
        Just((ex::Color::Green, reference::Color::Green)),
        Just((ex::Color::Blue, reference::Color::Blue)),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Generated code encodes byte-for-byte like the hand-written reference (which the
    /// topics crate cross-checks against Cyclone DDS), keys and key hashes included.
    #[test]
    fn generated_code_matches_the_hand_written_reference(
        id in any::<u32>(),
        tag in ascii(),
        name in text(8),
        color in ex_color(),
        origin in (any::<i16>(), any::<i64>()),
        coords in any::<[f64; 3]>().prop_filter("no NaN", |c| c.iter().all(|x| !x.is_nan())),
        path in prop::collection::vec((any::<i16>(), any::<i64>()), 0..=4),
        reading in ex_reading(),
        ok in any::<bool>(),
        extras in (any::<u8>(), proptest::option::of(any::<i32>()), proptest::option::of(text(4)), proptest::option::of(f64s()), any::<u8>()),
    ) {
        let g = ex::Sample {
            id, tag, name: name.clone(), color: color.0,
            origin: ex::Point { x: origin.0, y: origin.1 },
            coords,
            path: path.iter().map(|(x, y)| ex::Point { x: *x, y: *y }).collect(),
            reading: reading.0,
            ok,
        };
        let r = reference::Sample {
            id, tag, name, color: color.1,
            origin: reference::Point { x: origin.0, y: origin.1 },
            coords,
            path: path.iter().map(|(x, y)| reference::Point { x: *x, y: *y }).collect(),
            reading: reading.1,
            ok,
        };
        for e in [Endianness::Little, Endianness::Big] {
            prop_assert_eq!(g.encode(e).ok(), r.encode(e).ok());
        }
        prop_assert_eq!(g.key_hash().ok(), r.key_hash().ok());
        prop_assert_eq!(<ex::Sample as TopicType>::MAX_SERIALIZED_SIZE, <reference::Sample as TopicType>::MAX_SERIALIZED_SIZE);
        prop_assert_eq!(<ex::Sample as TopicType>::KEY_MAX_SERIALIZED_SIZE, <reference::Sample as TopicType>::KEY_MAX_SERIALIZED_SIZE);
        prop_assert_eq!(<ex::Sample as TopicType>::TYPE_NAME, <reference::Sample as TopicType>::TYPE_NAME);
        round_trip(&g)?;

        let ge = ex::Extras { head: extras.0, a: extras.1, b: extras.2.clone(), c: extras.3, tail: extras.4 };
        let re = reference::Extras { head: extras.0, a: extras.1, b: extras.2, c: extras.3, tail: extras.4 };
        for e in [Endianness::Little, Endianness::Big] {
            prop_assert_eq!(ge.encode(e).ok(), re.encode(e).ok());
        }
        prop_assert_eq!(<ex::Extras as TopicType>::MAX_SERIALIZED_SIZE, <reference::Extras as TopicType>::MAX_SERIALIZED_SIZE);
        round_trip(&ge)?;
    }
}

// ---- avionics.idl -----------------------------------------------------------------------

fn geo() -> impl Strategy<Value = av::GeoPoint> {
    (f64s(), f64s(), f32s()).prop_map(|(latitude_deg, longitude_deg, altitude_m)| av::GeoPoint {
        latitude_deg,
        longitude_deg,
        altitude_m,
    })
}

fn constraint() -> impl Strategy<Value = av::Constraint> {
    prop_oneof![
        f32s().prop_map(av::Constraint::AltitudeM),
        f32s().prop_map(av::Constraint::SpeedMps),
        any::<u64>().prop_map(av::Constraint::EtaNs),
        Just(av::Constraint::Unselected(av::ConstraintKind::NoConstraint)),
    ]
}

fn waypoint() -> impl Strategy<Value = av::Waypoint> {
    (
        text(5),
        prop_oneof![
            Just(av::WaypointKind::Fix),
            Just(av::WaypointKind::Vor),
            Just(av::WaypointKind::Ndb),
            Just(av::WaypointKind::Airport),
            Just(av::WaypointKind::UserDefined)
        ],
        geo(),
        constraint(),
    )
        .prop_map(|(name, kind, position, constraint)| av::Waypoint {
            name,
            kind,
            position,
            constraint,
        })
}

fn identity() -> impl Strategy<Value = av::TrackIdentity> {
    prop_oneof![
        any::<u32>().prop_map(av::TrackIdentity::IcaoAddress),
        (prop_oneof![Just(2i16), Just(3)], text(8))
            .prop_map(|(d, c)| av::TrackIdentity::Callsign(d, c)),
        (
            any::<i16>().prop_filter("unnamed", |d| !(1..=3).contains(d)),
            any::<u16>()
        )
            .prop_map(|(d, c)| av::TrackIdentity::ModeACode(d, c)),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn avionics_types_round_trip(
        id in any::<u32>(),
        t in any::<u64>(),
        f in (f32s(), f32s(), f32s(), f32s(), f32s(), f32s(), f64s(), f64s(), f64s()),
        position in geo(),
        plan in (text(8), text(4), text(4), any::<u16>(), prop::collection::vec(waypoint(), 0..=32)),
        track in (any::<u16>(), identity(), any::<[[f32; 3]; 3]>().prop_filter("no NaN", |m| m.iter().flatten().all(|x| !x.is_nan())), any::<u8>(), any::<i64>()),
        health in (text(16), any::<u32>(), ascii(), any::<i16>(), text(64), prop::collection::vec(any::<u32>(), 0..10)),
    ) {
        round_trip(&av::AirData {
            aircraft_id: id,
            timestamp_ns: t,
            indicated_airspeed_mps: f.0,
            true_airspeed_mps: f.1,
            mach: f.2,
            pressure_altitude_m: f.3,
            vertical_speed_mps: f.4,
            static_air_temperature_k: f.5,
            altitude_reference: av::AltitudeReference::Radio,
        })?;
        round_trip(&av::Attitude {
            aircraft_id: id,
            timestamp_ns: t,
            roll_rad: f.6,
            pitch_rad: f.7,
            heading_rad: f.8,
            body_rates_radps: [f.0, f.1, f.2],
        })?;
        round_trip(&av::NavigationPosition {
            aircraft_id: id,
            timestamp_ns: t,
            position: position.clone(),
            velocity_ned_mps: [f.3, f.4, f.5],
            horizontal_accuracy_m: f.0,
            gnss_valid: id % 2 == 0,
            phase: av::FlightPhase::Cruise,
        })?;
        round_trip(&av::FlightPlan {
            aircraft_id: id,
            callsign: plan.0,
            origin: plan.1,
            destination: plan.2,
            revision: plan.3,
            route: plan.4,
        })?;
        round_trip(&av::TrackReport {
            sensor_id: track.0,
            track_id: id,
            timestamp_ns: t,
            source: av::TrackSource::Adsb,
            identity: track.1,
            position,
            velocity_ned_mps: [f.0, f.1, f.2],
            position_covariance_m2: track.2,
            quality: track.3,
            clock_offset_ns: track.4,
        })?;
        round_trip(&av::HealthHeartbeat {
            aircraft_id: id,
            subsystem: health.0,
            sequence_number: health.1,
            status: av::HealthStatus::Degraded,
            severity_code: health.2,
            temperature_c: health.3,
            detail: health.4,
            fault_codes: health.5,
        })?;
    }
}

#[test]
fn names_shadowing_the_prelude_work() {
    use gen_shadowing::std as s;
    let v = s::serde::Serialize {
        e: s::Err::Ok(s::Result {
            ok: s::Ok { r#match: -3 },
            err: s::Vec { r#type: 9 },
        }),
        s: s::Choice::Some,
    };
    round_trip(&v).unwrap_or_else(|e| panic!("{e}"));
    let t = gen_shadowing::spindle_topics::TopicType {
        self_: s::String { self_: 5 },
    };
    round_trip(&t).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        <gen_shadowing::spindle_topics::TopicType as TopicType>::TYPE_NAME,
        "spindle_topics::TopicType"
    );
}

#[test]
fn avionics_sizes_and_names() {
    assert_eq!(<av::AirData as TopicType>::TYPE_NAME, "Avionics::AirData");
    // aircraft_id 4 + pad 4 + timestamp 8 + 6 floats 24 + enum 4 = 44, + header.
    assert_eq!(<av::AirData as TopicType>::MAX_SERIALIZED_SIZE, Some(48));
    assert_eq!(<av::AirData as TopicType>::KEY_MAX_SERIALIZED_SIZE, Some(4));
    assert_eq!(
        <av::HealthHeartbeat as TopicType>::MAX_SERIALIZED_SIZE,
        None
    );
    // aircraft_id 4 + string<16> (4 + 17) = 25: hashed with MD5.
    assert_eq!(
        <av::HealthHeartbeat as TopicType>::KEY_MAX_SERIALIZED_SIZE,
        Some(25)
    );
    assert!(<av::FlightPlan as TopicType>::MAX_SERIALIZED_SIZE.is_some());
}
