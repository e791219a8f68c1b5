//! Nothing panics on any input: random token soup, random bytes, and mutated valid IDL
//! (bytes deleted, duplicated, replaced, lines swapped) all end in `Ok` or a diagnostic.

use proptest::prelude::*;

const TOKENS: &[&str] = &[
    "module",
    "struct",
    "union",
    "enum",
    "typedef",
    "const",
    "switch",
    "case",
    "default",
    "sequence",
    "string",
    "wstring",
    "long",
    "short",
    "unsigned",
    "double",
    "float",
    "char",
    "wchar",
    "octet",
    "boolean",
    "fixed",
    "int8",
    "uint64",
    "TRUE",
    "FALSE",
    "@key",
    "@id(3)",
    "@optional",
    "@value(2)",
    "@bit_bound(4)",
    "@mutable",
    "@topic",
    "@default(1)",
    "@foo(a=1)",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "<",
    ">",
    ">>",
    "<<",
    ";",
    ":",
    "::",
    ",",
    "=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "~",
    "&",
    "|",
    "^",
    "A",
    "B",
    "M",
    "x",
    "y",
    "0",
    "1",
    "7",
    "0x10",
    "1.5",
    "'c'",
    "\"s\"",
    "#define A 1\n",
    "#ifdef A\n",
    "#endif\n",
    "#else\n",
    "#if defined(B)\n",
    "#include \"nope.idl\"\n",
    "\n",
    "/*",
    "*/",
    "//",
    " ",
];

fn corpus() -> Vec<String> {
    let mut v = Vec::new();
    for dir in ["tests/corpus/valid", "tests/corpus/invalid"] {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("corpus dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "idl"))
            .collect();
        files.sort();
        v.extend(
            files
                .iter()
                .map(|p| std::fs::read_to_string(p).expect("read")),
        );
    }
    v.push(std::fs::read_to_string("../topics/idl/avionics.idl").expect("avionics"));
    v
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Duplicate(usize, usize),
    Replace(usize, u8),
    Insert(usize, usize),
    SwapLines(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..20).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Replace(a, b)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Mutation::Insert(a, t)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
}

fn apply(src: &str, m: &Mutation) -> String {
    let mut b = src.as_bytes().to_vec();
    let len = b.len().max(1);
    match *m {
        Mutation::Delete(a, n) => {
            let a = a % len;
            let e = (a + n).min(b.len());
            if a < e {
                b.drain(a..e);
            }
        }
        Mutation::Duplicate(a, n) => {
            let a = a % len;
            let e = (a + n).min(b.len());
            if a < e {
                let piece: Vec<u8> = b[a..e].to_vec();
                b.splice(e..e, piece);
            }
        }
        Mutation::Replace(a, v) => {
            if !b.is_empty() {
                let a = a % b.len();
                b[a] = v;
            }
        }
        Mutation::Insert(a, t) => {
            let a = a % (b.len() + 1);
            b.splice(a..a, TOKENS[t].bytes());
        }
        Mutation::SwapLines(x, y) => {
            let text = String::from_utf8_lossy(&b).into_owned();
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let n = lines.len();
                lines.swap(x % n, y % n);
            }
            b = lines.join("\n").into_bytes();
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Compiles in memory; an error must render with a caret.
fn compile(src: &str) {
    if let Err(e) = spindle_idl::generate("fuzz.idl", src, &["tests/corpus/valid"]) {
        let text = e.to_string();
        assert!(text.contains(": error: "), "{text}");
        assert!(text.ends_with('^'), "{text}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(toks in prop::collection::vec(0..TOKENS.len(), 0..80)) {
        let src: Vec<&str> = toks.iter().map(|t| TOKENS[*t]).collect();
        compile(&src.join(" "));
    }

    #[test]
    fn random_text_never_panics(src in "\\PC{0,200}") {
        compile(&src);
    }

    #[test]
    fn mutated_valid_idl_never_panics(
        which in any::<prop::sample::Index>(),
        ms in prop::collection::vec(mutation(), 1..6),
    ) {
        let files = corpus();
        let mut src = files[which.index(files.len())].clone();
        for m in &ms {
            src = apply(&src, m);
        }
        compile(&src);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep_modules = "module M { ".repeat(10_000);
    assert!(spindle_idl::check("deep.idl", &deep_modules).is_err());
    let deep_seq = format!(
        "typedef {}long{} T;",
        "sequence<".repeat(10_000),
        ">".repeat(10_000)
    );
    assert!(spindle_idl::check("deep.idl", &deep_seq).is_err());
    let deep_expr = format!("const long X = {}1;", "-".repeat(10_000));
    assert!(spindle_idl::check("deep.idl", &deep_expr).is_err());
}

#[test]
fn exponential_macros_are_an_error_not_a_hang() {
    let mut src = String::from("#define M0 1\n");
    for i in 1..30 {
        src.push_str(&format!("#define M{i} M{} M{}\n", i - 1, i - 1));
    }
    src.push_str("const long X = M29;\n");
    let err = spindle_idl::check("macros.idl", &src).unwrap_err();
    assert!(err.to_string().contains("tokens"), "{err}");
}

#[test]
fn long_struct_chains_generate() {
    // Each struct holds the previous one: codegen memoizes, no deep recursion.
    let mut src = String::from("struct S0 { long x; };\n");
    for i in 1..2000 {
        src.push_str(&format!("struct S{i} {{ S{} inner; }};\n", i - 1));
    }
    spindle_idl::generate("chain.idl", &src, &[] as &[&str]).unwrap_or_else(|e| panic!("{e}"));
}
