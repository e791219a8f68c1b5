//! IDL that declares absurd sizes (arrays of billions of elements, arrays of empty
//! structs) is described, sized, templated and decoded without panicking, hanging or
//! exhausting memory: sizes saturate, templates and decodes are bounded errors.

use spindle_dynamic::random::TEMPLATE_VALUES_MAX;
use spindle_dynamic::{DynType, Error};

fn dyn_type(src: &str, name: &str) -> DynType {
    DynType::from_idl_source("bad_input.idl", src, name).unwrap_or_else(|e| panic!("{e}"))
}

/// `double m[4294967295][4294967295]` declares 147 exabytes: the worst-case size
/// saturates at `usize::MAX` (no usable bound) instead of overflowing.
#[test]
fn a_size_past_usize_max_saturates() {
    let t = dyn_type("struct Huge { double m[4294967295][4294967295]; };", "Huge");
    assert_eq!(t.max_serialized_size(), Some(usize::MAX));
    let k = dyn_type(
        "struct HugeKey { @key double m[4294967295][4294967295]; long x; };",
        "HugeKey",
    );
    assert_eq!(k.max_serialized_size(), Some(usize::MAX));
    assert_eq!(k.key_max_serialized_size(), Some(usize::MAX));
}

/// A sample of an array of empty structs takes no bytes: decoding one from 4 bytes must
/// not walk billions of elements.
#[test]
fn decoding_arrays_of_empty_structs_is_bounded() {
    for (src, what) in [
        ("struct E {}; struct S { E a[4294967295]; };", "S.a: "),
        ("struct E {}; struct S { E a[65536][65536]; };", "S.a: "),
        (
            "struct E {}; struct S { long n; E a[100000][100000][100000]; };",
            "S.a: ",
        ),
    ] {
        let t = dyn_type(src, "S");
        let err = t
            .decode_json(&[0, 1, 0, 0, 7, 0, 0, 0])
            .expect_err(src)
            .to_string();
        assert!(err.starts_with(what), "{src}: {err}");
        // Refused whole, at the array, before any element was built.
        assert!(err.contains("an array of"), "{src}: {err}");
    }
}

/// Templates (`spindle idl --template`) and random samples (`spindle pub --random`) of a
/// type declaring billions of elements are an error naming the member, built no further.
#[test]
fn templates_of_huge_arrays_are_bounded_errors() {
    let t = dyn_type(
        "struct In { long x; }; struct Big { long n; In a[4000000000]; };",
        "Big",
    );
    for (what, got) in [("zero", t.zero_json()), ("random", t.random_json(7))] {
        match got {
            Err(Error::Value { path, detail }) => {
                assert_eq!(path, "Big.a", "{what}");
                assert!(detail.contains("4000000000 elements"), "{what}: {detail}");
                assert!(detail.contains("TEMPLATE_VALUES_MAX"), "{what}: {detail}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // Arrays that fit one by one but not together: stopped at the budget.
    let n = TEMPLATE_VALUES_MAX / 4;
    let t = dyn_type(
        &format!("struct Many {{ octet a[{n}]; octet b[{n}]; octet c[{n}]; octet d[{n}]; }};"),
        "Many",
    );
    match t.zero_json() {
        Err(Error::Value { path, .. }) => assert_eq!(path, "Many.d"),
        other => panic!("{:?}", other.map(|_| "a value")),
    }
    // Below the budget, values are built as before.
    let t = dyn_type("struct Ok { long a[3][2]; string s; };", "Ok");
    assert_eq!(
        t.zero_json().unwrap(),
        serde_json::json!({"a": [[0, 0], [0, 0], [0, 0]], "s": ""})
    );
    assert_eq!(t.random_json(3).unwrap(), t.random_json(3).unwrap());
}
