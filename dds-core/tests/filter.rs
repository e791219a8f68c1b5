//! The filter language's golden files: `tests/filter/valid.txt` (expressions, parameters,
//! the enum members a type would declare, samples and whether each passes) and `tests/filter/invalid.txt` (expressions and the
//! exact error each gives). A failure names the file and line of the case.

use std::path::Path;

use spindle_dds_core::filter::{Enumerators, Filter, Step};

/// One case of a golden file: where it starts, its expression and parameters, its enum
/// members (`enum: path = NAME value, …`: path and enumerators), and its `sample:` /
/// `=>` lines.
struct Case {
    line: usize,
    expr: String,
    params: Vec<String>,
    enums: Vec<(Vec<Step>, Enumerators)>,
    checks: Vec<(Option<String>, String)>,
}

/// `phase = TAXI 1, CRUISE 4` → the path `phase` and its enumerators.
fn enum_line(file: &str, line: usize, text: &str) -> (Vec<Step>, Enumerators) {
    let bad = || format!("{file}:{line}: enum: wants `path = NAME value, …`, got {text:?}");
    let (path, values) = text
        .split_once(" = ")
        .unwrap_or_else(|| panic!("{}", bad()));
    let path = path.split('.').map(|n| Step::Name(n.to_string())).collect();
    let values = values
        .split(", ")
        .map(|e| {
            let parsed = e
                .split_once(' ')
                .and_then(|(name, v)| Some((name.to_string(), v.parse::<i128>().ok()?)));
            parsed.unwrap_or_else(|| panic!("{}", bad()))
        })
        .collect();
    (path, values)
}

fn cases(file: &str) -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/filter")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("golden file");
    let mut out: Vec<Case> = Vec::new();
    let mut sample = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(e) = raw.strip_prefix("expr:") {
            out.push(Case {
                line: i + 1,
                expr: e.strip_prefix(' ').unwrap_or(e).to_string(),
                params: Vec::new(),
                enums: Vec::new(),
                checks: Vec::new(),
            });
            continue;
        }
        let case = out
            .last_mut()
            .unwrap_or_else(|| panic!("{file}:{}: no expr: yet", i + 1));
        if let Some(p) = line.strip_prefix("params: ") {
            case.params = p.split(" | ").map(str::to_string).collect();
        } else if let Some(e) = line.strip_prefix("enum: ") {
            case.enums.push(enum_line(file, i + 1, e));
        } else if let Some(s) = line.strip_prefix("sample: ") {
            sample = Some(s.to_string());
        } else if let Some(want) = line.strip_prefix("=> ") {
            case.checks.push((sample.take(), want.to_string()));
        } else {
            panic!("{file}:{}: unknown line {line:?}", i + 1);
        }
    }
    assert!(!out.is_empty(), "{file} has cases");
    out
}

#[test]
fn valid_expressions_parse_and_decide_each_sample_as_the_golden_file_says() {
    let all = cases("valid.txt");
    for c in &all {
        let mut f = Filter::new(&c.expr, &c.params)
            .unwrap_or_else(|e| panic!("valid.txt:{}: {:?} refused: {e}", c.line, c.expr));
        for (path, values) in &c.enums {
            f.set_enum(path, values.clone());
        }
        assert!(!c.checks.is_empty(), "valid.txt:{}: no samples", c.line);
        for (sample, want) in &c.checks {
            let json = sample.as_deref().expect("a sample before =>");
            let value: serde_json::Value = serde_json::from_str(json)
                .unwrap_or_else(|e| panic!("valid.txt:{}: bad sample {json}: {e}", c.line));
            let want: bool = want.parse().expect("=> true or => false");
            assert_eq!(
                f.matches(&value),
                want,
                "valid.txt:{}: {:?} on {json}",
                c.line,
                c.expr
            );
        }
    }
    assert!(all.len() >= 15, "the golden file lost cases: {}", all.len());
}

#[test]
fn invalid_expressions_are_refused_with_the_error_the_golden_file_gives() {
    for c in cases("invalid.txt") {
        let [(None, want)] = c.checks.as_slice() else {
            panic!("invalid.txt:{}: one `=> error` line, no sample", c.line);
        };
        match Filter::new(&c.expr, &c.params) {
            Ok(f) => panic!("invalid.txt:{}: {:?} parsed: {f:?}", c.line, c.expr),
            Err(e) => assert_eq!(&e.to_string(), want, "invalid.txt:{}", c.line),
        }
    }
}

#[test]
fn parameters_change_without_parsing_again_and_must_cover_the_expression() {
    let mut f = Filter::new("alt > %0", &["100".into()]).unwrap();
    let s = serde_json::json!({"alt": 150});
    assert!(f.matches(&s));
    f.set_parameters(&["200".into()]).unwrap();
    assert!(!f.matches(&s));
    assert!(f.set_parameters(&[]).is_err());
    assert!(
        !f.matches(&s),
        "a refused change leaves the parameters as they were"
    );
    assert_eq!(f.members().len(), 1);
}

/// Expressions built from random pieces of the language and random characters, and
/// random samples: parsing and evaluating never panic, and an error's offset lies within
/// the expression. Seeded; a failure prints the seed and the expression.
#[test]
fn random_expressions_and_samples_never_panic() {
    use rand::{Rng, SeedableRng};
    const PIECES: &[&str] = &[
        "alt",
        "a.b",
        "w[1]",
        "w[",
        "]",
        ".",
        "(",
        ")",
        "=",
        "<>",
        "<",
        "<=",
        ">",
        ">=",
        "LIKE",
        "AND",
        "OR",
        "NOT",
        "BETWEEN",
        "TRUE",
        "'s'",
        "'",
        "''",
        "%0",
        "%9",
        "%",
        "-",
        "1",
        "0x1F",
        "1.5e3",
        "9999999999999999999999999999999999999999",
        "é",
        "\u{1F680}",
        " ",
        ";",
        "_",
    ];
    let seed: u64 = std::env::var("SPINDLE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let params: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let samples = [
        serde_json::json!({"alt": 5, "a": {"b": "x"}, "w": [1, 2.5, "s"]}),
        serde_json::json!({"alt": "high", "w": null}),
        serde_json::json!(null),
    ];
    for _ in 0..20_000 {
        let n = rng.gen_range(0..12);
        let expr: String = (0..n)
            .map(|_| PIECES[rng.gen_range(0..PIECES.len())])
            .collect::<Vec<_>>()
            .join(if rng.gen_bool(0.5) { " " } else { "" });
        let outcome = std::panic::catch_unwind(|| match Filter::new(&expr, &params) {
            Ok(f) => {
                for s in &samples {
                    f.matches(s);
                }
                None
            }
            Err(e) => Some(e.offset),
        });
        match outcome {
            Err(_) => panic!("seed {seed}: {expr:?} panicked"),
            Ok(Some(offset)) => assert!(offset <= expr.len(), "seed {seed}: {expr:?}"),
            Ok(None) => {}
        }
    }
}

/// An enum member of a generated type (the filter learns the enum from the type's IDL)
/// compares by value with a number, a parameter or an enumerator's name alike:
/// `FlightPhase` is PREFLIGHT 0, TAXI 1, TAKEOFF 2, CLIMB 3, CRUISE 4, …
#[test]
fn enum_members_of_a_generated_type_compare_by_name_or_number() {
    use spindle_dds_core::content_filter::ContentFilter;
    use spindle_topics::avionics::{FlightPhase, GeoPoint, NavigationPosition};
    use spindle_topics::{Endianness, TopicType};
    let nav = |phase| {
        NavigationPosition {
            aircraft_id: 7,
            timestamp_ns: 0,
            position: GeoPoint {
                latitude_deg: 0.0,
                longitude_deg: 0.0,
                altitude_m: 0.0,
            },
            velocity_ned_mps: [0.0; 3],
            horizontal_accuracy_m: 5.0,
            gnss_valid: true,
            phase,
        }
        .encode(Endianness::Little)
        .unwrap()
    };
    let (cruise, climb) = (nav(FlightPhase::Cruise), nav(FlightPhase::Climb));
    for (expr, params, cruise_passes, climb_passes) in [
        ("phase = 4", vec![], true, false),
        ("phase = 'CRUISE'", vec![], true, false),
        ("phase = %0", vec!["4".to_string()], true, false),
        ("phase = %0", vec!["CLIMB".to_string()], false, true),
        ("phase >= 3 AND phase < 'CRUISE'", vec![], false, true),
        ("phase BETWEEN 'CLIMB' AND 4", vec![], true, true),
        ("phase <> 4", vec![], false, true),
    ] {
        let f = ContentFilter::of_type::<NavigationPosition>(expr, &params).unwrap();
        assert_eq!(
            (f.passes(&cruise), f.passes(&climb)),
            (cruise_passes, climb_passes),
            "{expr} with {params:?}"
        );
    }
}

/// What a member is compared with must be able to match it: an enumerator that the enum
/// has, a number for a number, quoted text for text, `TRUE`/`FALSE` for a boolean — a
/// typo is refused naming the member, not a filter that silently matches nothing. So is
/// a parameter of the wrong kind, at creation and when parameters change (the filter
/// then keeps its old ones).
#[test]
fn literals_and_parameters_that_cannot_match_their_member_are_refused() {
    use spindle_dds_core::content_filter::ContentFilter;
    use spindle_dynamic::DynType;
    let idl = "module T { enum Color { RED, GREEN, BLUE }; \
               struct Reading { @key string id; long value; Color color; string note; \
               boolean ok; }; };";
    let t = DynType::from_idl_source("t.idl", idl, "T::Reading").unwrap();
    let refused = |expr: &str, params: &[&str]| {
        let params: Vec<String> = params.iter().map(|s| s.to_string()).collect();
        match ContentFilter::of_dyn_type(t.clone(), expr, &params) {
            Ok(_) => panic!("{expr} with {params:?} was accepted"),
            Err(e) => e.to_string(),
        }
    };
    for (expr, params, want) in [
        (
            "color = 'PURPLE'",
            &[][..],
            "member `color` is an enum: 'PURPLE' is none of its enumerators (RED, GREEN, BLUE)",
        ),
        (
            "value > 'abc'",
            &[],
            "member `value` holds numbers: 'abc' is not one",
        ),
        (
            "note > 5",
            &[],
            "member `note` holds text: 5 is not quoted text",
        ),
        (
            "ok = 1",
            &[],
            "member `ok` holds TRUE or FALSE: 1 is neither",
        ),
        (
            "value > %0",
            &["abc"],
            "member `value` holds numbers: %0 = 'abc'",
        ),
        ("note LIKE 5", &[], "LIKE takes a quoted pattern, not 5"),
        ("value BETWEEN 1 AND 'x'", &[], "'x' is not one"),
    ] {
        let e = refused(expr, params);
        assert!(e.contains(want), "{expr}: {e}");
    }
    let f = ContentFilter::of_dyn_type(
        t.clone(),
        "color = 'RED' AND value > %0 AND note LIKE 'x%' AND ok = TRUE",
        &["5".to_string()],
    )
    .unwrap();
    let e = f
        .set_parameters(&["abc".to_string()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("%0 = 'abc'"), "{e}");
    assert_eq!(f.parameters(), ["5"], "the old parameters stay");
}
