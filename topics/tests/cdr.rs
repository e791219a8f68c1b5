//! Encoding, decoding, alignment, bounds and key-hash tests of the CDR helpers and the
//! built-in types, with known byte strings worked out by hand from the XCDR1 rules.

use spindle_topics::builtin::examples::{Color, Point, Reading, Sample};
use spindle_topics::cdr::{self, IdlEnum};
use spindle_topics::{Endianness, Error, KeyHash, KeyedString, Sequence, TopicType};

fn sample() -> Sample {
    Sample {
        id: 0x0102_0304,
        tag: 'A',
        name: "abc".into(),
        color: Color::Blue,
        origin: Point { x: -2, y: 5 },
        coords: [1.0, -0.5, 2.25],
        path: vec![Point { x: 1, y: 2 }],
        reading: Reading::Level(3, 9.5),
        ok: true,
    }
}

#[test]
fn keyed_string_le_bytes_match_the_xcdr1_rules() {
    let v = KeyedString {
        key: "k".into(),
        value: "hello".into(),
    };
    let bytes = v.encode(Endianness::Little).unwrap();
    let expected: Vec<u8> = [
        &[0x00, 0x01, 0x00, 0x00][..], // CDR_LE, options 0
        &[2, 0, 0, 0, b'k', 0],        // key: length incl. NUL
        &[0, 0],                       // pad to 4 (relative to the body start)
        &[6, 0, 0, 0, b'h', b'e', b'l', b'l', b'o', 0],
    ]
    .concat();
    assert_eq!(bytes, expected);
    assert_eq!(KeyedString::decode(&bytes).unwrap(), v);
}

#[test]
fn alignment_is_relative_to_the_body_not_the_buffer() {
    // Point { short x; long long y; }: y sits at body offset 8 (pad 6), i.e. buffer offset
    // 12, which is not 8-aligned in the buffer: that is what XCDR1 requires.
    let bytes = cdr::encode(&Point { x: 1, y: 2 }, Endianness::Big).unwrap();
    assert_eq!(
        bytes,
        [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]
    );
    let back: Point = cdr::decode(&bytes).unwrap();
    assert_eq!(back, Point { x: 1, y: 2 });
}

#[test]
fn sample_encodes_enum_values_union_and_array() {
    let s = sample();
    for e in [Endianness::Little, Endianness::Big] {
        let bytes = s.encode(e).unwrap();
        assert_eq!(Sample::decode(&bytes).unwrap(), s);
        // color is the explicit value 7 at body offset 24 (after the name "abc").
        let color = &bytes[4 + 16..4 + 20];
        let want = if e == Endianness::Big {
            [0, 0, 0, 7]
        } else {
            [7, 0, 0, 0]
        };
        assert_eq!(color, want, "{e:?}: {bytes:02x?}");
    }
}

#[test]
fn sample_max_serialized_size_is_exact_at_the_maximum() {
    let mut s = sample();
    s.name = "12345678".into();
    s.path = vec![Point { x: 1, y: 1 }; 4];
    s.reading = Reading::Note("abcdefgh".into());
    let n = s.encode(Endianness::Little).unwrap().len();
    assert_eq!(Some(n), Sample::MAX_SERIALIZED_SIZE);
}

#[test]
fn bounds_are_checked_on_encode_and_decode() {
    let mut s = sample();
    s.name = "123456789".into();
    let err = s.encode(Endianness::Little).unwrap_err();
    assert_eq!(
        err,
        Error::BoundExceeded {
            field: "Example::Sample::name",
            len: 9,
            max: 8
        }
    );
    // The same bytes from a peer (encoded without the check) are rejected on decode.
    let bytes = cdr::encode(&s, Endianness::Little).unwrap();
    assert!(matches!(
        Sample::decode(&bytes),
        Err(Error::BoundExceeded { len: 9, .. })
    ));

    let mut s = sample();
    s.path = vec![Point::default(); 5];
    assert!(matches!(
        s.encode(Endianness::Big),
        Err(Error::BoundExceeded { max: 4, .. })
    ));
}

#[test]
fn buffer_too_small_reports_the_exact_need() {
    let s = sample();
    let full = s.encode(Endianness::Little).unwrap();
    for len in [0, 3, 4, 10, full.len() - 1] {
        let mut buf = vec![0u8; len];
        assert_eq!(
            s.encode_into(Endianness::Little, &mut buf),
            Err(Error::BufferTooSmall {
                needed: full.len(),
                available: len
            })
        );
    }
    let mut buf = vec![0xAAu8; full.len() + 7];
    let n = s.encode_into(Endianness::Little, &mut buf).unwrap();
    assert_eq!(&buf[..n], &full[..]);
}

#[test]
fn bad_enum_value_and_bad_encapsulation_are_errors() {
    assert_eq!(Color::from_value(2), None);
    let mut bytes = sample().encode(Endianness::Big).unwrap();
    bytes[4 + 16..4 + 20].copy_from_slice(&[0, 0, 0, 2]);
    match Sample::decode(&bytes) {
        Err(Error::Decode { offset, detail, .. }) => {
            assert_eq!(offset, 4 + 20);
            assert!(detail.contains("no enumerator with value 2"), "{detail}");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
    bytes[1] = 0x07;
    assert_eq!(
        Sample::decode(&bytes),
        Err(Error::BadEncapsulation {
            found: [0x00, 0x07]
        })
    );
    assert!(matches!(
        Sample::decode(&bytes[..2]),
        Err(Error::Decode { .. })
    ));
}

#[test]
fn huge_declared_lengths_are_rejected_without_allocating() {
    // A string length of 4 GiB in 8 bytes.
    let bytes = [0x00, 0x01, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff];
    assert!(matches!(
        KeyedString::decode(&bytes),
        Err(Error::Decode { offset: 8, .. })
    ));
    assert!(matches!(
        Sequence::decode(&bytes),
        Err(Error::Decode { .. })
    ));
    let seq: Result<Vec<u64>, _> = cdr::decode(&bytes);
    assert!(seq.is_err());
}

#[test]
fn strings_must_be_nul_terminated_utf8() {
    let bytes = [0x00, 0x01, 0x00, 0x00, 2, 0, 0, 0, b'a', b'b'];
    let r: Result<String, _> = cdr::decode(&bytes);
    assert!(matches!(r, Err(Error::Decode { detail, .. }) if detail.contains("NUL")));
    let bytes = [0x00, 0x01, 0x00, 0x00, 2, 0, 0, 0, 0xff, 0];
    let r: Result<String, _> = cdr::decode(&bytes);
    assert!(r.is_err());
}

#[test]
fn non_ascii_char_is_an_invalid_value() {
    let mut s = sample();
    s.tag = 'é';
    assert!(matches!(
        s.encode(Endianness::Little),
        Err(Error::InvalidValue { field: "char", .. })
    ));
}

#[test]
fn union_default_branch_keeps_its_discriminator() {
    let mut s = sample();
    for r in [
        Reading::Count(-7),
        Reading::Level(2, 1.5),
        Reading::Note("n".into()),
        Reading::Raw(-300, 9),
    ] {
        s.reading = r;
        let bytes = s.encode(Endianness::Big).unwrap();
        assert_eq!(Sample::decode(&bytes).unwrap(), s);
    }
    s.reading = Reading::Raw(3, 9);
    assert!(matches!(
        s.encode(Endianness::Big),
        Err(Error::InvalidValue { .. })
    ));
}

#[test]
fn sequence_is_keyless_with_zero_key_hash() {
    let s = Sequence {
        payload: (0..=255).collect(),
    };
    let bytes = s.encode(Endianness::Little).unwrap();
    assert_eq!(&bytes[..8], &[0, 1, 0, 0, 0, 1, 0, 0]);
    assert_eq!(bytes.len(), 8 + 256);
    assert_eq!(Sequence::decode(&bytes).unwrap(), s);
    const { assert!(!Sequence::HAS_KEY) };
    assert_eq!(s.key_hash().unwrap(), KeyHash([0; 16]));
}

#[test]
fn short_bounded_key_is_the_hash_itself() {
    let s = sample();
    let mut key = Vec::new();
    s.encode_key_be(&mut key).unwrap();
    assert_eq!(key, [1, 2, 3, 4, b'A']);
    let mut want = [0u8; 16];
    want[..5].copy_from_slice(&key);
    assert_eq!(s.key_hash().unwrap(), KeyHash(want));
}

#[test]
fn unbounded_key_hash_is_md5_of_the_big_endian_key() {
    let v = KeyedString {
        key: "hello".into(),
        value: "x".into(),
    };
    // MD5(00 00 00 06 'h' 'e' 'l' 'l' 'o' 00), computed independently with `md5sum`.
    let want = hex("80e4d12f30e3c36fa1324dc7176489ad");
    let mut key = Vec::new();
    v.encode_key_be(&mut key).unwrap();
    assert_eq!(key, [0, 0, 0, 6, b'h', b'e', b'l', b'l', b'o', 0]);
    assert_eq!(v.key_hash().unwrap(), KeyHash(want));
}

#[test]
fn remembered_key_digests_are_the_digests_of_the_same_bytes() {
    // Far more keys than the per-thread memo holds, so slots are shared and replaced,
    // each hashed twice (the second time from the memo when its slot still holds it) and
    // once more after the others: every answer must be the MD5 of exactly its bytes.
    use md5::{Digest, Md5};
    let keys: Vec<Vec<u8>> = (0..4 * cdr::KEY_HASH_MEMO_ENTRIES)
        .map(|i| {
            let len = 17 + i % (cdr::KEY_HASH_MEMO_KEY_BYTES_MAX + 8 - 17);
            (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
        })
        .collect();
    let want = |k: &[u8]| KeyHash(Md5::digest(k).into());
    for k in &keys {
        assert_eq!(cdr::key_hash_of(k, None), want(k), "first: {k:?}");
        assert_eq!(cdr::key_hash_of(k, None), want(k), "again: {k:?}");
    }
    for k in keys.iter().rev() {
        assert_eq!(cdr::key_hash_of(k, Some(1 << 20)), want(k), "after: {k:?}");
    }
    // A key that fits 16 bytes of a type whose key always fits is padded, not digested,
    // even when the same bytes were digested for another type.
    let short = [1u8, 2, 3];
    assert_eq!(cdr::key_hash_of(&short, None), want(&short));
    let mut padded = [0u8; 16];
    padded[..3].copy_from_slice(&short);
    assert_eq!(cdr::key_hash_of(&short, Some(16)), KeyHash(padded));
}

#[test]
fn key_encoding_aligns_relative_to_the_key_stream() {
    let mut out = vec![7u8];
    cdr::encode_key_be(&(&5u32,), &mut out).unwrap();
    assert_eq!(out, [7, 0, 0, 0, 0, 0, 0, 5]);
    cdr::encode_key_be(&(&1u64,), &mut out).unwrap();
    assert_eq!(out.len(), 16);
}

fn hex(s: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

#[test]
fn example_size_constants_are_the_hand_computed_ones() {
    assert_eq!(Sample::MAX_SERIALIZED_SIZE, Some(4 + 146));
    assert_eq!(Sample::KEY_MAX_SERIALIZED_SIZE, Some(5));
}

/// `MaxSize` against brute force: encode every combination of lengths of a few shapes
/// whose padding depends on earlier lengths, and compare the largest encoding.
#[test]
fn max_size_is_exact_against_brute_force() {
    use spindle_topics::cdr::MaxSize;
    // struct { octet a; string<3> s; double d; sequence<short, 3> q; long long e; }
    let dp = MaxSize::start()
        .primitive(1)
        .string(3)
        .primitive(8)
        .primitive_sequence(2, 3)
        .primitive(8)
        .encoded();
    let mut brute = 0;
    for s_len in 0..=3 {
        for q_len in 0..=3 {
            let v = (1u8, "x".repeat(s_len), 2.0f64, vec![3i16; q_len], 4i64);
            brute = brute.max(cdr::encode(&v, Endianness::Little).unwrap().len());
        }
    }
    assert_eq!(dp, brute);

    // sequence<Point, 3> after a string<5>: elements start at every residue.
    let dp = {
        let mut cur = MaxSize::start().string(5).primitive(4);
        let mut all = cur;
        for _ in 0..3 {
            cur = Point::max_size_from(cur);
            all = all.either(cur);
        }
        all.encoded()
    };
    let mut brute = 0;
    for s_len in 0..=5 {
        for n in 0..=3 {
            let v = ("y".repeat(s_len), vec![Point::default(); n]);
            brute = brute.max(cdr::encode(&v, Endianness::Big).unwrap().len());
        }
    }
    assert_eq!(dp, brute);

    // Arrays and a union's branches.
    let dp = MaxSize::start()
        .primitive(1)
        .primitive_array(4, 3)
        .primitive(2);
    assert_eq!(dp.size(), 4 + 12 + 2);
    let reading = Reading::max_size_from(MaxSize::start().primitive(1));
    // octet 0, disc 2..4, string<8>: 4..8 + 9 = 17.
    assert_eq!(reading.size(), 17);
}

#[test]
fn key_hash_displays_as_hex() {
    let mut h = [0u8; 16];
    h[0] = 0xab;
    h[15] = 0x01;
    assert_eq!(KeyHash(h).to_string(), "ab000000000000000000000000000001");
}

#[test]
fn optional_members_use_the_xcdr1_parameter_header() {
    use spindle_topics::builtin::examples::Extras;
    let full = Extras {
        head: 1,
        a: Some(5),
        b: Some("xy".into()),
        c: Some(2.5),
        tail: 9,
    };
    let le = full.encode(Endianness::Little).unwrap();
    // head, pad, then per member [short header 7f01 0008 | member id | size] and the value
    // aligned from its own start, then tail (Cyclone DDS agrees, see crosscheck.rs).
    let want: Vec<u8> = [
        &[0x00, 0x01, 0x00, 0x00, 0x01, 0, 0, 0][..],
        &[0x01, 0x7f, 0x08, 0x00, 1, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0],
        &[
            0x01, 0x7f, 0x08, 0x00, 2, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, b'x', b'y', 0, 0,
        ],
        &[
            0x01, 0x7f, 0x08, 0x00, 3, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0x40,
        ],
        &[9],
    ]
    .concat();
    assert_eq!(le, want);
    assert_eq!(Extras::decode(&le).unwrap(), full);
    let be = full.encode(Endianness::Big).unwrap();
    assert_eq!(&be[8..12], &[0x7f, 0x01, 0x00, 0x08]);
    assert_eq!(Extras::decode(&be).unwrap(), full);

    let empty = Extras {
        head: 1,
        tail: 9,
        ..Extras::default()
    };
    let le = empty.encode(Endianness::Little).unwrap();
    assert_eq!(le.len(), 8 + 3 * 12 + 1);
    assert_eq!(Extras::decode(&le).unwrap(), empty);

    // The maximum: b = "abcd" and every member present.
    let max = Extras {
        b: Some("abcd".into()),
        ..full
    };
    assert_eq!(
        Some(max.encode(Endianness::Big).unwrap().len()),
        Extras::MAX_SERIALIZED_SIZE
    );

    // A wrong member id is rejected.
    let mut bad = full.encode(Endianness::Little).unwrap();
    bad[12] = 2;
    assert!(matches!(Extras::decode(&bad), Err(Error::Decode { .. })));
}

#[test]
fn optional_outside_the_helpers_is_an_error_not_a_panic() {
    use spindle_topics::builtin::examples::Extras;
    let v = Extras {
        a: Some(1),
        ..Extras::default()
    };
    assert!(::cdr::serialize::<_, _, ::cdr::CdrLe>(&v, ::cdr::Infinite).is_err());
}

/// `wstring` as Cyclone DDS's C library writes it (`dds_stream_write_wstringBO` in
/// `dds_cdrstream_write.part.c`): a u32 length in bytes (twice the UTF-16 code units),
/// the code units in the stream's byte order, no terminator; a character outside the BMP
/// as a surrogate pair. Worked out by hand from that rule; the cyclonedds Python package
/// cannot encode a wstring to cross-check with.
#[test]
fn wstring_bytes_are_a_byte_length_and_utf16_code_units() {
    use spindle_topics::cdr::WString;
    // "Hé😀": H U+0048, é U+00E9, 😀 U+1F600 = D83D DE00.
    let w = WString("Hé😀".into());
    assert_eq!(w.len(), 4);
    let le = cdr::encode(&(1u8, w.clone()), Endianness::Little).unwrap();
    assert_eq!(
        le,
        [
            0, 1, 0, 0, // header
            1, 0, 0, 0, // the u8, padding to 4
            8, 0, 0, 0, // length in bytes
            0x48, 0, 0xe9, 0, 0x3d, 0xd8, 0x00, 0xde
        ]
    );
    let be = cdr::encode(&w, Endianness::Big).unwrap();
    assert_eq!(
        be,
        [0, 0, 0, 0, 0, 0, 0, 8, 0, 0x48, 0, 0xe9, 0xd8, 0x3d, 0xde, 0x00]
    );
    assert_eq!(cdr::decode::<(u8, WString)>(&le).unwrap(), (1, w.clone()));
    assert_eq!(cdr::decode::<WString>(&be).unwrap(), w);
    // The empty wstring is a zero length and nothing else.
    let empty = cdr::encode(&WString::default(), Endianness::Little).unwrap();
    assert_eq!(empty, [0, 1, 0, 0, 0, 0, 0, 0]);
    // An odd length, an unpaired surrogate, a truncated one, a huge length: errors.
    for bad in [
        &[0, 1, 0, 0, 3, 0, 0, 0, 0x48, 0, 0][..],
        &[0, 1, 0, 0, 2, 0, 0, 0, 0x3d, 0xd8][..],
        &[0, 1, 0, 0, 4, 0, 0, 0, 0x48, 0][..],
        &[0, 1, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0x48, 0][..],
    ] {
        assert!(
            matches!(cdr::decode::<WString>(bad), Err(Error::Decode { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn sequence_fast_path_gives_the_serde_paths_bytes_and_values() {
    for endianness in [Endianness::Little, Endianness::Big] {
        for len in [0usize, 1, 3, 4, 5, 7, 8, 9, 255, 1024] {
            let s = Sequence {
                payload: (0..len).map(|i| (i * 7 + 1) as u8).collect(),
            };
            let mut fast = vec![0xEE; len + 16];
            let mut slow = vec![0xEE; len + 16];
            let n = s.encode_into(endianness, &mut fast).unwrap();
            let m = cdr::encode_into(&s, endianness, &mut slow).unwrap();
            assert_eq!(
                &fast[..n],
                &slow[..m],
                "{endianness:?}, {len} bytes: the serde path's encoding"
            );
            assert_eq!(Sequence::decode(&fast[..n]).unwrap(), s);
            assert_eq!(cdr::decode::<Sequence>(&fast[..n]).unwrap(), s);
            // Cut anywhere, both refuse it (and neither panics).
            for cut in 0..n {
                assert!(
                    Sequence::decode(&fast[..cut]).is_err(),
                    "{endianness:?}, {len} bytes cut at {cut}"
                );
                assert!(cdr::decode::<Sequence>(&fast[..cut]).is_err());
            }
            let mut short = vec![0u8; n - 1];
            assert!(
                matches!(
                    s.encode_into(endianness, &mut short),
                    Err(Error::BufferTooSmall { needed, .. }) if needed == n
                ),
                "a short buffer is told the size needed"
            );
        }
    }
    // A length past the end names the type and what is missing.
    let mut bytes = vec![0x00, 0x01, 0, 0];
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(b"abc");
    let e = Sequence::decode(&bytes).unwrap_err().to_string();
    assert!(
        e.contains("Spindle::Sequence") && e.contains("3 left"),
        "{e}"
    );
}

#[test]
fn decode_in_place_gives_what_decode_gives_in_the_same_buffer() {
    // Decoding a shorter sample over a longer one, then a longer one again: each time the
    // value decode gives, and (once grown) the payload's buffer is the same allocation.
    let mut into = Sequence {
        payload: Vec::with_capacity(2048),
    };
    let buffer = into.payload.as_ptr();
    for (round, len) in [1024usize, 3, 0, 2048, 17].into_iter().enumerate() {
        for endianness in [Endianness::Little, Endianness::Big] {
            let s = Sequence {
                payload: (0..len).map(|i| (i * 13 + round) as u8).collect(),
            };
            let bytes = s.encode(endianness).unwrap();
            into.decode_in_place(&bytes, &KeyHash::default()).unwrap();
            assert_eq!(
                into,
                Sequence::decode(&bytes).unwrap(),
                "{endianness:?} {len}"
            );
            assert_eq!(
                into.payload.as_ptr(),
                buffer,
                "{len} bytes: no new allocation"
            );
            // A cut encoding is refused, never a panic, and the value stays decodable.
            if let Some(cut) = bytes.len().checked_sub(1) {
                assert!(into
                    .decode_in_place(&bytes[..cut], &KeyHash::default())
                    .is_err());
            }
        }
    }
    // The default (decode and move in) for a type without its own.
    let k = KeyedString {
        key: "k".into(),
        value: "v".into(),
    };
    let mut other = KeyedString::default();
    other
        .decode_in_place(&k.encode(Endianness::Little).unwrap(), &KeyHash::default())
        .unwrap();
    assert_eq!(other, k);
}
