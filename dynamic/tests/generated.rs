//! Dynamic types are byte-identical to the generated code: for every struct of the
//! avionics model and of the IDL compiler's valid corpus, random values (seeded, from the
//! type description) encode dynamically to bytes the generated type decodes and encodes
//! back to the same bytes, in both byte orders, with the same key hash; the generated
//! bytes decode dynamically and re-encode to themselves; and the worst-case sizes (which
//! decide the key hash) agree; and the IDL each generated type carries
//! (`TopicType::IDL_SOURCE`) describes it as byte-identically.

#[allow(dead_code, clippy::all)]
mod gen_everything {
    include!("../../idl/tests/corpus/valid/everything.rs");
}
#[allow(dead_code, clippy::all)]
mod gen_example {
    include!("../../idl/tests/corpus/valid/example.rs");
}
#[allow(dead_code, clippy::all)]
mod gen_shadowing {
    include!("../../idl/tests/corpus/valid/shadowing.rs");
}

use std::path::Path;

use proptest::prelude::*;
use spindle_dynamic::DynType;
use spindle_topics::{avionics as av, Endianness, TopicType};

const CORPUS: &str = "../idl/tests/corpus/valid";
const CASES: u32 = 64;

fn dyn_type(file: &str, name: &str) -> DynType {
    let (path, dir) = if file == "avionics.idl" {
        (
            "../topics/idl/avionics.idl".to_string(),
            "../topics/idl".to_string(),
        )
    } else {
        (format!("{CORPUS}/{file}"), CORPUS.to_string())
    };
    DynType::from_idl_file(Path::new(&path), &[dir], name).unwrap_or_else(|e| panic!("{e}"))
}

/// One seed's checks for generated type `T` against its dynamic description.
fn same_bytes<T: TopicType>(t: &DynType, seed: u64) -> Result<(), TestCaseError> {
    let v = t.random_json(seed).unwrap();
    for e in [Endianness::Little, Endianness::Big] {
        let s = t
            .encode_json(&v, e)
            .map_err(|err| TestCaseError::fail(format!("dynamic encode: {err}\n{v}")))?;
        let g = T::decode(&s.bytes)
            .map_err(|err| TestCaseError::fail(format!("generated decode: {err}\n{v}")))?;
        let back = g
            .encode(e)
            .map_err(|err| TestCaseError::fail(format!("generated encode: {err}")))?;
        prop_assert_eq!(&back, &s.bytes, "value {}", v);
        let hash = g
            .key_hash()
            .map_err(|err| TestCaseError::fail(format!("generated key hash: {err}")))?;
        prop_assert_eq!(hash, s.key_hash, "value {}", v);
        let j = t
            .decode_json(&back)
            .map_err(|err| TestCaseError::fail(format!("dynamic decode: {err}")))?;
        let again = t
            .encode_json(&j, e)
            .map_err(|err| TestCaseError::fail(format!("dynamic re-encode: {err}\n{j}")))?;
        prop_assert_eq!(&again.bytes, &back, "decoded {}", j);
        // Through JSON text too (what `pub` and `sub` exchange).
        let text = serde_json::to_string(&j).expect("JSON text");
        let from_text = t
            .encode_json_str(&text, e)
            .map_err(|err| TestCaseError::fail(format!("from text: {err}\n{text}")))?;
        prop_assert_eq!(&from_text.bytes, &back, "text {}", text);
    }
    Ok(())
}

fn check<T: TopicType>(file: &str, name: &str) {
    let t = dyn_type(file, name);
    // The IDL the generated type carries (preprocessed, self-contained) describes the
    // very same types as the file it came from.
    let src = T::IDL_SOURCE.unwrap_or_else(|| panic!("{name}: no IDL_SOURCE"));
    let carried = DynType::from_idl_source(name, src, T::TYPE_NAME)
        .unwrap_or_else(|e| panic!("{name}: IDL_SOURCE: {e}\n{src}"));
    assert_eq!(carried.type_name(), T::TYPE_NAME);
    same_bytes_value::<T>(&carried, &carried.zero_json().unwrap());
    for seed in 0..8 {
        if let Err(e) = same_bytes::<T>(&carried, seed) {
            panic!("{name}: IDL_SOURCE, seed {seed}: {e}");
        }
    }
    assert_eq!(t.type_name(), T::TYPE_NAME);
    assert_eq!(t.has_key(), T::HAS_KEY, "{name}: HAS_KEY");
    assert_eq!(
        t.max_serialized_size(),
        T::MAX_SERIALIZED_SIZE,
        "{name}: MAX_SERIALIZED_SIZE"
    );
    assert_eq!(
        t.key_max_serialized_size(),
        T::KEY_MAX_SERIALIZED_SIZE,
        "{name}: KEY_MAX_SERIALIZED_SIZE"
    );
    // The zero value is a valid sample too.
    same_bytes_value::<T>(&t, &t.zero_json().unwrap());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    if let Err(e) = runner.run(&any::<u64>(), |seed| same_bytes::<T>(&t, seed)) {
        panic!("{name}: {e}");
    }
}

fn same_bytes_value<T: TopicType>(t: &DynType, v: &serde_json::Value) {
    let s = t
        .encode_json(v, Endianness::Little)
        .unwrap_or_else(|e| panic!("{e}\n{v}"));
    let g = T::decode(&s.bytes).unwrap_or_else(|e| panic!("{e}\n{v}"));
    assert_eq!(g.encode(Endianness::Little).expect("encode"), s.bytes);
}

#[test]
fn avionics_types_match_the_generated_code() {
    check::<av::AirData>("avionics.idl", "Avionics::AirData");
    check::<av::Attitude>("avionics.idl", "Avionics::Attitude");
    check::<av::NavigationPosition>("avionics.idl", "Avionics::NavigationPosition");
    check::<av::FlightPlan>("avionics.idl", "Avionics::FlightPlan");
    check::<av::TrackReport>("avionics.idl", "Avionics::TrackReport");
    check::<av::HealthHeartbeat>("avionics.idl", "Avionics::HealthHeartbeat");
    check::<av::TerrainTile>("avionics.idl", "Avionics::TerrainTile");
    check::<av::GeoPoint>("avionics.idl", "Avionics::GeoPoint");
    check::<av::Waypoint>("avionics.idl", "Avionics::Waypoint");
}

#[test]
fn corpus_types_match_the_generated_code() {
    use gen_everything::common as co;
    use gen_everything::everything as ev;
    use gen_example::example as ex;
    use gen_shadowing::spindle_topics as st;
    use gen_shadowing::std as sh;
    check::<ev::Everything>("everything.idl", "Everything::Everything");
    check::<ev::Bounded>("everything.idl", "Everything::Bounded");
    check::<ev::Base>("everything.idl", "Everything::Base");
    check::<ev::Node>("everything.idl", "Everything::Node");
    check::<ev::inner::Keyed>("everything.idl", "Everything::Inner::Keyed");
    check::<ev::inner::Point>("everything.idl", "Everything::Inner::Point");
    check::<ev::Reopened>("everything.idl", "Everything::Reopened");
    check::<co::Stamp>("common.idl", "Common::Stamp");
    check::<ex::Point>("example.idl", "Example::Point");
    check::<ex::Sample>("example.idl", "Example::Sample");
    check::<ex::Extras>("example.idl", "Example::Extras");
    check::<sh::String>("shadowing.idl", "std::String");
    check::<sh::Vec>("shadowing.idl", "std::Vec");
    check::<sh::Option>("shadowing.idl", "std::Option");
    check::<sh::Ok>("shadowing.idl", "std::Ok");
    check::<sh::Result>("shadowing.idl", "std::Result");
    check::<sh::serde::Serialize>("shadowing.idl", "std::serde::Serialize");
    check::<st::TopicType>("shadowing.idl", "spindle_topics::TopicType");
}

/// The `TopicType::TYPE_HASH` the code generator wrote for every struct of the avionics
/// model and of the valid corpus is the hash `DynType::type_hash` computes at run time
/// from the same IDL (the file, and the preprocessed IDL the type carries): one function
/// behind both, so a generated program and `spindle pub`/`sub` with the IDL file agree.
#[test]
fn generated_type_hashes_equal_the_run_time_type_hash() {
    use gen_everything::common as co;
    use gen_everything::everything as ev;
    use gen_example::example as ex;
    use gen_shadowing::spindle_topics as st;
    use gen_shadowing::std as sh;
    use std::collections::BTreeSet;

    fn one<T: TopicType>(file: &str) -> (String, String) {
        let t = dyn_type(file, T::TYPE_NAME);
        let generated = T::TYPE_HASH.unwrap_or_else(|| panic!("{}: no TYPE_HASH", T::TYPE_NAME));
        assert_eq!(generated, t.type_hash(), "{} of {file}", T::TYPE_NAME);
        let src = T::IDL_SOURCE.expect("IDL_SOURCE");
        let carried = DynType::from_idl_source("carried.idl", src, T::TYPE_NAME).expect("type");
        assert_eq!(
            generated,
            carried.type_hash(),
            "{}: IDL_SOURCE",
            T::TYPE_NAME
        );
        (file.to_string(), T::TYPE_NAME.to_string())
    }
    let checked: BTreeSet<(String, String)> = [
        one::<av::AirData>("avionics.idl"),
        one::<av::Attitude>("avionics.idl"),
        one::<av::NavigationPosition>("avionics.idl"),
        one::<av::FlightPlan>("avionics.idl"),
        one::<av::TrackReport>("avionics.idl"),
        one::<av::HealthHeartbeat>("avionics.idl"),
        one::<av::TerrainTile>("avionics.idl"),
        one::<av::GeoPoint>("avionics.idl"),
        one::<av::Waypoint>("avionics.idl"),
        one::<ev::Everything>("everything.idl"),
        one::<ev::Bounded>("everything.idl"),
        one::<ev::Base>("everything.idl"),
        one::<ev::Node>("everything.idl"),
        one::<ev::inner::Keyed>("everything.idl"),
        one::<ev::inner::Point>("everything.idl"),
        one::<ev::Reopened>("everything.idl"),
        one::<co::Stamp>("everything.idl"),
        one::<co::Stamp>("common.idl"),
        one::<ex::Point>("example.idl"),
        one::<ex::Sample>("example.idl"),
        one::<ex::Extras>("example.idl"),
        one::<sh::String>("shadowing.idl"),
        one::<sh::Vec>("shadowing.idl"),
        one::<sh::Option>("shadowing.idl"),
        one::<sh::Ok>("shadowing.idl"),
        one::<sh::Result>("shadowing.idl"),
        one::<sh::serde::Serialize>("shadowing.idl"),
        one::<st::TopicType>("shadowing.idl"),
    ]
    .into_iter()
    .collect();
    // Every struct of every file is among them: a new one must be added here.
    for (file, any) in [
        ("avionics.idl", "Avionics::AirData"),
        ("everything.idl", "Everything::Everything"),
        ("common.idl", "Common::Stamp"),
        ("example.idl", "Example::Point"),
        ("shadowing.idl", "std::String"),
    ] {
        for name in dyn_type(file, any).library().struct_names() {
            assert!(
                checked.contains(&(file.to_string(), name.to_string())),
                "{name} of {file} is generated but not checked here"
            );
        }
    }
}
