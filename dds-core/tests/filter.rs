//! The filter language's golden files: `tests/filter/valid.txt` (expressions, parameters,
//! samples and whether each passes) and `tests/filter/invalid.txt` (expressions and the
//! exact error each gives). A failure names the file and line of the case.

use std::path::Path;

use spindle_dds_core::filter::Filter;

/// One case of a golden file: where it starts, its expression and parameters, and its
/// `sample:` / `=>` lines.
struct Case {
    line: usize,
    expr: String,
    params: Vec<String>,
    checks: Vec<(Option<String>, String)>,
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
                checks: Vec::new(),
            });
            continue;
        }
        let case = out
            .last_mut()
            .unwrap_or_else(|| panic!("{file}:{}: no expr: yet", i + 1));
        if let Some(p) = line.strip_prefix("params: ") {
            case.params = p.split(" | ").map(str::to_string).collect();
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
        let f = Filter::new(&c.expr, &c.params)
            .unwrap_or_else(|e| panic!("valid.txt:{}: {:?} refused: {e}", c.line, c.expr));
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
