//! Property tests: decoding arbitrary or corrupted bytes never panics, and encode → decode
//! is the identity for every built-in and example type in both byte orders.
//!
//! Runs are seeded (`SEED`); a failure prints the minimal failing input, and rerunning
//! reproduces it.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use spindle_topics::builtin::examples::{Color, Extras, Point, Reading, Sample};
use spindle_topics::{cdr, Endianness, Error, KeyedString, Sequence, TopicType};

/// The seed of every property run in this file.
const SEED: u64 = 0x5EED_70B1C5;

fn config() -> Config {
    Config {
        cases: 512,
        rng_seed: RngSeed::Fixed(SEED),
        failure_persistence: None,
        ..Config::default()
    }
}

fn endianness() -> impl Strategy<Value = Endianness> {
    prop_oneof![Just(Endianness::Little), Just(Endianness::Big)]
}

fn point() -> impl Strategy<Value = Point> {
    (any::<i16>(), any::<i64>()).prop_map(|(x, y)| Point { x, y })
}

fn reading() -> impl Strategy<Value = Reading> {
    prop_oneof![
        any::<i32>().prop_map(Reading::Count),
        (
            2i16..=3,
            any::<f64>().prop_filter("NaN != NaN", |f| !f.is_nan())
        )
            .prop_map(|(d, v)| Reading::Level(d, v)),
        "[a-z]{0,8}".prop_map(Reading::Note),
        (
            any::<i16>().prop_filter("named label", |d| !(1..=4).contains(d)),
            any::<u8>()
        )
            .prop_map(|(d, v)| Reading::Raw(d, v)),
    ]
}

fn color() -> impl Strategy<Value = Color> {
    prop_oneof![Just(Color::Red), Just(Color::Green), Just(Color::Blue)]
}

prop_compose! {
    fn sample()(
        id in any::<u32>(),
        tag in proptest::char::range('\0', '\x7f'),
        name in "[ -~]{0,8}",
        color in color(),
        origin in point(),
        coords in proptest::array::uniform3(-1e9f64..1e9),
        path in proptest::collection::vec(point(), 0..=4),
        reading in reading(),
        ok in any::<bool>(),
    ) -> Sample {
        Sample { id, tag, name, color, origin, coords, path, reading, ok }
    }
}

prop_compose! {
    fn extras()(
        head in any::<u8>(),
        a in proptest::option::of(any::<i32>()),
        b in proptest::option::of("[a-z]{0,4}"),
        c in proptest::option::of(-1e300f64..1e300),
        tail in any::<u8>(),
    ) -> Extras {
        Extras { head, a, b, c, tail }
    }
}

fn decode_all(bytes: &[u8]) {
    // Only "does not panic" is asserted here; the results are checked elsewhere.
    let _ = KeyedString::decode(bytes);
    let _ = Sequence::decode(bytes);
    let _ = Sample::decode(bytes);
    let _ = Extras::decode(bytes);
    let _ = cdr::decode::<Vec<String>>(bytes);
    let _ = cdr::decode::<Vec<Vec<u64>>>(bytes);
    let _ = cdr::decode::<(char, bool, f32, Reading)>(bytes);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..128),
                                header in prop_oneof![Just([0u8, 1, 0, 0]), Just([0u8, 0, 0, 0]),
                                                      any::<[u8; 4]>()]) {
        let mut bytes = header.to_vec();
        bytes.extend_from_slice(&body);
        decode_all(&bytes);
        decode_all(&body);
    }

    #[test]
    fn corrupted_encodings_never_panic(s in sample(), e in endianness(),
                                       flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
                                       cut in any::<usize>()) {
        let mut bytes = s.encode(e).unwrap();
        for (at, v) in flips {
            let i = at % bytes.len();
            bytes[i] = v;
        }
        decode_all(&bytes);
        let cut = cut % (bytes.len() + 1);
        decode_all(&bytes[..cut]);
    }

    #[test]
    fn sample_round_trips(s in sample(), e in endianness()) {
        let bytes = s.encode(e).unwrap();
        prop_assert!(bytes.len() <= Sample::MAX_SERIALIZED_SIZE.unwrap());
        prop_assert_eq!(Sample::decode(&bytes).unwrap(), s);
    }

    #[test]
    fn extras_round_trip_and_survive_corruption(v in extras(), e in endianness(),
                                                at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = v.encode(e).unwrap();
        prop_assert!(bytes.len() <= Extras::MAX_SERIALIZED_SIZE.unwrap());
        prop_assert_eq!(Extras::decode(&bytes).unwrap(), v);
        let i = at % bytes.len();
        bytes[i] = byte;
        decode_all(&bytes);
    }

    #[test]
    fn truncated_encodings_are_errors(s in sample(), e in endianness(), cut in any::<usize>()) {
        let bytes = s.encode(e).unwrap();
        let cut = cut % bytes.len();
        prop_assert!(Sample::decode(&bytes[..cut]).is_err());
    }

    #[test]
    fn keyed_string_round_trips(key in ".{0,40}", value in ".{0,40}", e in endianness()) {
        let v = KeyedString { key, value };
        let bytes = v.encode(e).unwrap();
        prop_assert_eq!(KeyedString::decode(&bytes).unwrap(), v.clone());
        // The key hash depends on the key only.
        let other = KeyedString { key: v.key.clone(), value: "other".into() };
        prop_assert_eq!(v.key_hash().unwrap(), other.key_hash().unwrap());
    }

    #[test]
    fn sequence_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..2048),
                            e in endianness()) {
        let v = Sequence { payload };
        let bytes = v.encode(e).unwrap();
        prop_assert_eq!(bytes.len(), 8 + v.payload.len());
        prop_assert_eq!(Sequence::decode(&bytes).unwrap(), v);
    }

    #[test]
    fn encode_into_any_buffer_is_exact_or_says_what_it_needs(s in sample(), e in endianness(),
                                                             len in 0usize..200) {
        let full = s.encode(e).unwrap();
        let mut buf = vec![0u8; len];
        match s.encode_into(e, &mut buf) {
            Ok(n) => {
                prop_assert_eq!(n, full.len());
                prop_assert_eq!(&buf[..n], &full[..]);
            }
            Err(err) => prop_assert_eq!(err, Error::BufferTooSmall { needed: full.len(), available: len }),
        }
    }
}
