//! The DDS filter language (DDS 1.4 Annex B): what `ContentFilteredTopic` and
//! `QueryCondition` expressions say, parsed once and evaluated on a sample's members.
//!
//! The subset: comparisons (`=`, `<>`, `<`, `<=`, `>`, `>=`, `LIKE`) between a member and
//! a literal, a parameter or another member; `BETWEEN` / `NOT BETWEEN`; `AND`, `OR`, `NOT`
//! and parentheses. Members are dotted paths into nested structs (`pos.lat`), with array
//! or sequence indexes (`waypoints[2].alt`). Literals: integers (decimal, `0x` hex),
//! floats, `'strings'` (a quote doubled inside), `TRUE`/`FALSE`; an enum member compares
//! with its enumerator's name as a string (`mode = 'CRUISE'`) or with its value
//! (`mode = 4`), once the filter knows the enum ([`Filter::set_enum`]: a content filter
//! tells it from the type); then every comparison but `LIKE` is by value, so
//! `mode > 'CLIMB'` is by declaration order, not spelling. `%0` …
//! `%99` are the expression's parameters, given as strings and read as literals when the
//! filter is made, and changeable later ([`Filter::set_parameters`]). Keywords are
//! case-insensitive. Errors name the byte offset where the expression went wrong.
//!
//! A sample is given as its members' values ([`serde_json::Value`], as the dynamic-type
//! decoder gives them: enums by name), and evaluation never fails: a member the sample
//! does not have, or values that cannot be compared, make the predicate false.
//!
//! ```
//! use spindle_dds_core::filter::Filter;
//! use serde_json::json;
//!
//! let f = Filter::new("alt BETWEEN %0 AND %1 AND callsign LIKE 'AF%' AND NOT mode = 'TAXI'",
//!     &["1000".into(), "12000".into()])?;
//! assert!(f.matches(&json!({"alt": 3500, "callsign": "AF123", "mode": "CLIMB"})));
//! assert!(!f.matches(&json!({"alt": 500, "callsign": "AF123", "mode": "CLIMB"})));
//! let e = Filter::new("alt >", &[]).unwrap_err();
//! assert_eq!(e.to_string(), "filter expression at byte 5: expected a value, found the end");
//! # Ok::<(), spindle_dds_core::filter::FilterError>(())
//! ```

use serde_json::Value;

/// Longest expression accepted, in bytes.
pub const EXPRESSION_BYTES_MAX: usize = 4096;
/// Most parameters (`%0` … `%99`).
pub const PARAMETERS_MAX: usize = 100;
/// Deepest nesting of parentheses and `NOT`.
pub const NESTING_MAX: usize = 64;

/// An expression that cannot be parsed, or parameters that do not fit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter expression at byte {offset}: {detail}")]
pub struct FilterError {
    /// Where in the expression (bytes from its start) it went wrong.
    pub offset: usize,
    /// What was wrong there.
    pub detail: String,
}

/// An enum's enumerators: (name, value), as [`Filter::set_enum`] takes them.
pub type Enumerators = Vec<(String, i128)>;

/// What a member holds, for checking what it is compared with ([`Filter::set_kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// An integer or floating-point number (octets too).
    Number,
    /// A string or a character.
    Text,
    /// A boolean.
    Bool,
}

/// A literal in an expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// An integer.
    Int(i128),
    /// A floating-point number.
    Float(f64),
    /// A string (also an enumerator's name).
    Str(String),
    /// `TRUE` or `FALSE`.
    Bool(bool),
}

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A member path: names and indexes from the sample down.
    Member(Vec<Step>),
    /// A literal.
    Literal(Literal),
    /// Parameter `%n` (its value is taken from the filter's parameters).
    Parameter(usize),
}

/// One step of a member path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A member by name.
    Name(String),
    /// An element of an array or sequence.
    Index(usize),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `LIKE` (`%` any run, `_` one character)
    Like,
}

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `a op b`.
    Compare(Operand, Op, Operand),
    /// `a BETWEEN lo AND hi` (`negated`: `NOT BETWEEN`).
    Between {
        /// The value tested.
        value: Operand,
        /// Lower bound, inclusive.
        low: Operand,
        /// Upper bound, inclusive.
        high: Operand,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// Both.
    And(Box<Condition>, Box<Condition>),
    /// Either.
    Or(Box<Condition>, Box<Condition>),
    /// Not.
    Not(Box<Condition>),
}

/// A parsed filter with its parameters (see the [module](self) docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    expression: String,
    condition: Condition,
    /// The highest parameter the expression names, plus one.
    parameters_needed: usize,
    parameters: Vec<Literal>,
    /// The enum members among the paths: each path's enumerators (name, value).
    enums: Vec<(Vec<Step>, Enumerators)>,
    /// The other members whose kind of value is known ([`Filter::set_kind`]).
    kinds: Vec<(Vec<Step>, ValueKind)>,
}

impl Filter {
    /// Parses `expression` with `parameters` (`%0` is `parameters[0]`, …).
    pub fn new(expression: &str, parameters: &[String]) -> Result<Filter, FilterError> {
        if expression.len() > EXPRESSION_BYTES_MAX {
            return Err(FilterError {
                offset: EXPRESSION_BYTES_MAX,
                detail: format!(
                    "the expression has {} bytes, at most {EXPRESSION_BYTES_MAX} \
                     (EXPRESSION_BYTES_MAX)",
                    expression.len()
                ),
            });
        }
        let tokens = lex(expression)?;
        let mut p = Parser {
            tokens,
            at: 0,
            end: expression.len(),
            depth: 0,
            parameters_needed: 0,
        };
        let condition = p.condition()?;
        if let Some(t) = p.tokens.get(p.at) {
            return Err(FilterError {
                offset: t.offset,
                detail: format!("expected AND, OR or the end, found {}", t.kind.describe()),
            });
        }
        let mut f = Filter {
            expression: expression.to_string(),
            condition,
            parameters_needed: p.parameters_needed,
            parameters: Vec::new(),
            enums: Vec::new(),
            kinds: Vec::new(),
        };
        f.set_parameters(parameters)?;
        Ok(f)
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The parsed condition.
    pub fn condition(&self) -> &Condition {
        &self.condition
    }

    /// Replaces the parameters (DDS `set_expression_parameters`): each is read as a
    /// literal (a number, `TRUE`/`FALSE`, a quoted string, else the text as a string).
    /// An error (the expression unchanged) if fewer are given than the expression names,
    /// or more than [`PARAMETERS_MAX`].
    pub fn set_parameters(&mut self, parameters: &[String]) -> Result<(), FilterError> {
        if parameters.len() > PARAMETERS_MAX || parameters.len() != self.parameters_needed {
            let named = match self.parameters_needed {
                0 => "no parameter".to_string(),
                1 => "one parameter (%0)".to_string(),
                n => format!("{n} parameters (%0 … %{})", n - 1),
            };
            return Err(FilterError {
                offset: 0,
                detail: format!(
                    "the expression names {named}; {} given (at most {PARAMETERS_MAX})",
                    parameters.len()
                ),
            });
        }
        let old = std::mem::replace(
            &mut self.parameters,
            parameters.iter().map(|s| parameter_literal(s)).collect(),
        );
        // A parameter that cannot match its member's kind of value is refused, as a
        // literal in the expression is.
        if let Err((_, detail)) = self.check_operands() {
            self.parameters = old;
            return Err(FilterError { offset: 0, detail });
        }
        Ok(())
    }

    /// Tells the filter that the member at `path` holds values of `kind`: what it is
    /// compared with is then checked ([`Filter::check_operands`]).
    pub fn set_kind(&mut self, path: &[Step], kind: ValueKind) {
        self.kinds.retain(|(p, _)| p != path);
        self.kinds.push((path.to_vec(), kind));
    }

    /// Checks every literal and parameter compared with a member whose kind of value is
    /// known ([`Filter::set_kind`], [`Filter::set_enum`]): a number for a number, quoted
    /// text for text or a `LIKE` pattern, `TRUE`/`FALSE` for a boolean, an enumerator's
    /// name or a number for an enum. `Err((member, why))` for the first that cannot
    /// match — a typo that would otherwise match nothing, silently.
    pub fn check_operands(&self) -> Result<(), (Vec<Step>, String)> {
        let mut out = Ok(());
        self.walk(&self.condition, &mut |m, other, op| {
            if out.is_ok() {
                out = self.check_pair(m, other, op);
            }
        });
        out
    }

    /// Calls `f(member, other, op)` for each side of each comparison (and each bound of
    /// a `BETWEEN`) that names a member.
    fn walk<'c>(&self, c: &'c Condition, f: &mut dyn FnMut(&'c Operand, &'c Operand, Op)) {
        match c {
            Condition::And(a, b) | Condition::Or(a, b) => {
                self.walk(a, f);
                self.walk(b, f);
            }
            Condition::Not(a) => self.walk(a, f),
            Condition::Compare(a, op, b) => {
                f(a, b, *op);
                f(b, a, *op);
            }
            Condition::Between {
                value, low, high, ..
            } => {
                for bound in [low, high] {
                    f(value, bound, Op::Ge);
                    f(bound, value, Op::Le);
                }
            }
        }
    }

    fn check_pair(&self, m: &Operand, other: &Operand, op: Op) -> Result<(), (Vec<Step>, String)> {
        let Operand::Member(path) = m else {
            return Ok(());
        };
        let (l, named) = match other {
            Operand::Literal(l) => (l, String::new()),
            Operand::Parameter(n) => match self.parameters.get(*n) {
                Some(l) => (l, format!("%{n} = ")),
                None => return Ok(()),
            },
            Operand::Member(_) => return Ok(()),
        };
        let shown = match l {
            Literal::Str(t) => format!("{named}'{t}'"),
            Literal::Int(i) => format!("{named}{i}"),
            Literal::Float(x) => format!("{named}{x}"),
            Literal::Bool(b) => format!("{named}{}", if *b { "TRUE" } else { "FALSE" }),
        };
        let member = path_text(path);
        let why = if op == Op::Like {
            (!matches!(l, Literal::Str(_)))
                .then(|| format!("LIKE takes a quoted pattern, not {shown}"))
        } else if let Some(e) = self.enum_of(m) {
            match l {
                Literal::Int(_) => None,
                Literal::Str(t) if e.iter().any(|(n, _)| n == t) => None,
                _ => {
                    let names: Vec<&str> = e.iter().map(|(n, _)| n.as_str()).collect();
                    Some(format!(
                        "member `{member}` is an enum: {shown} is none of its enumerators \
                         ({}) nor a number",
                        names.join(", ")
                    ))
                }
            }
        } else {
            let kind = self.kinds.iter().find(|(p, _)| p == path).map(|(_, k)| *k);
            match (kind, l) {
                (None, _)
                | (Some(ValueKind::Number), Literal::Int(_) | Literal::Float(_))
                | (Some(ValueKind::Text), Literal::Str(_))
                | (Some(ValueKind::Bool), Literal::Bool(_)) => None,
                (Some(ValueKind::Number), _) => Some(format!(
                    "member `{member}` holds numbers: {shown} is not one"
                )),
                (Some(ValueKind::Text), _) => Some(format!(
                    "member `{member}` holds text: {shown} is not quoted text"
                )),
                (Some(ValueKind::Bool), _) => Some(format!(
                    "member `{member}` holds TRUE or FALSE: {shown} is neither"
                )),
            }
        };
        why.map_or(Ok(()), |w| Err((path.clone(), w)))
    }

    /// Tells the filter that the member at `path` is an enum with these `enumerators`
    /// (name, value): the member and what it is compared with (an enumerator's name, a
    /// number, a parameter, another member) then compare by value, except in `LIKE`.
    /// Without it an enum member, given by name, compares as a string.
    pub fn set_enum(&mut self, path: &[Step], enumerators: Enumerators) {
        self.enums.retain(|(p, _)| p != path);
        self.enums.push((path.to_vec(), enumerators));
    }

    /// Whether `sample` (its members' values) passes the filter.
    pub fn matches(&self, sample: &Value) -> bool {
        self.eval(&self.condition, sample)
    }

    /// The member paths the expression names (to check them against a type once).
    pub fn members(&self) -> Vec<&[Step]> {
        let mut out = Vec::new();
        collect_members(&self.condition, &mut out);
        out
    }

    fn eval(&self, c: &Condition, s: &Value) -> bool {
        match c {
            Condition::And(a, b) => self.eval(a, s) && self.eval(b, s),
            Condition::Or(a, b) => self.eval(a, s) || self.eval(b, s),
            Condition::Not(a) => !self.eval(a, s),
            Condition::Compare(a, op, b) => match (self.value(a, s), self.value(b, s)) {
                (Some(x), Some(y)) if *op != Op::Like => {
                    let (ta, tb) = (self.enum_of(a), self.enum_of(b));
                    compare(&by_value(x, ta.or(tb)), *op, &by_value(y, tb.or(ta)))
                }
                (Some(x), Some(y)) => compare(&x, *op, &y),
                _ => false,
            },
            Condition::Between {
                value,
                low,
                high,
                negated,
            } => {
                let (Some(v), Some(lo), Some(hi)) = (
                    self.value(value, s),
                    self.value(low, s),
                    self.value(high, s),
                ) else {
                    return false;
                };
                let t = self
                    .enum_of(value)
                    .or_else(|| self.enum_of(low))
                    .or_else(|| self.enum_of(high));
                let (v, lo, hi) = (by_value(v, t), by_value(lo, t), by_value(hi, t));
                let inside = compare(&v, Op::Ge, &lo) && compare(&v, Op::Le, &hi);
                inside != *negated
            }
        }
    }

    /// The enumerators of the enum member `o` names, if it names one.
    fn enum_of(&self, o: &Operand) -> Option<&[(String, i128)]> {
        let Operand::Member(path) = o else {
            return None;
        };
        self.enums
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, e)| e.as_slice())
    }

    /// The value an operand has for sample `s`.
    fn value(&self, o: &Operand, s: &Value) -> Option<Literal> {
        match o {
            Operand::Literal(l) => Some(l.clone()),
            Operand::Parameter(n) => self.parameters.get(*n).cloned(),
            Operand::Member(path) => {
                let mut v = s;
                for step in path {
                    v = match step {
                        Step::Name(n) => v.get(n.as_str())?,
                        Step::Index(i) => v.get(*i)?,
                    };
                }
                match v {
                    Value::Bool(b) => Some(Literal::Bool(*b)),
                    Value::Number(n) => Some(
                        n.as_i64()
                            .map(|i| Literal::Int(i.into()))
                            .or_else(|| n.as_u64().map(|u| Literal::Int(u.into())))
                            .unwrap_or_else(|| Literal::Float(n.as_f64().unwrap_or(f64::NAN))),
                    ),
                    Value::String(t) => Some(Literal::Str(t.clone())),
                    _ => None,
                }
            }
        }
    }
}

/// `a.b[2].c`.
pub fn path_text(path: &[Step]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Step::Name(n) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(n);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// `l` by value under `enumerators`: an enumerator's name becomes its value; anything
/// else (a number, an unknown name) is left as it is.
fn by_value(l: Literal, enumerators: Option<&[(String, i128)]>) -> Literal {
    match (&l, enumerators) {
        (Literal::Str(name), Some(e)) => e
            .iter()
            .find(|(n, _)| n == name)
            .map_or(l, |(_, v)| Literal::Int(*v)),
        _ => l,
    }
}

fn collect_members<'a>(c: &'a Condition, out: &mut Vec<&'a [Step]>) {
    let operand = |o: &'a Operand, out: &mut Vec<&'a [Step]>| {
        if let Operand::Member(p) = o {
            out.push(p.as_slice());
        }
    };
    match c {
        Condition::And(a, b) | Condition::Or(a, b) => {
            collect_members(a, out);
            collect_members(b, out);
        }
        Condition::Not(a) => collect_members(a, out),
        Condition::Compare(a, _, b) => {
            operand(a, out);
            operand(b, out);
        }
        Condition::Between {
            value, low, high, ..
        } => {
            operand(value, out);
            operand(low, out);
            operand(high, out);
        }
    }
}

/// A parameter's text as a literal.
fn parameter_literal(s: &str) -> Literal {
    let t = s.trim();
    if let Ok(tokens) = lex(t) {
        if let [Token {
            kind: Kind::Literal(l),
            ..
        }] = tokens.as_slice()
        {
            return l.clone();
        }
        if let [Token {
            kind: Kind::Minus, ..
        }, Token {
            kind: Kind::Literal(l),
            ..
        }] = tokens.as_slice()
        {
            if let Some(n) = negate(l) {
                return n;
            }
        }
    }
    Literal::Str(s.to_string())
}

fn negate(l: &Literal) -> Option<Literal> {
    match l {
        Literal::Int(i) => Some(Literal::Int(-i)),
        Literal::Float(f) => Some(Literal::Float(-f)),
        _ => None,
    }
}

/// `x op y`; values of kinds that do not compare give false.
fn compare(x: &Literal, op: Op, y: &Literal) -> bool {
    use std::cmp::Ordering;
    let ord = match (x, y) {
        (Literal::Int(a), Literal::Int(b)) => Some(a.cmp(b)),
        (Literal::Int(a), Literal::Float(b)) => (*a as f64).partial_cmp(b),
        (Literal::Float(a), Literal::Int(b)) => a.partial_cmp(&(*b as f64)),
        (Literal::Float(a), Literal::Float(b)) => a.partial_cmp(b),
        (Literal::Str(a), Literal::Str(b)) => {
            if op == Op::Like {
                return like(a, b);
            }
            Some(a.cmp(b))
        }
        (Literal::Bool(a), Literal::Bool(b)) => {
            return match op {
                Op::Eq => a == b,
                Op::Ne => a != b,
                _ => false,
            }
        }
        _ => None,
    };
    let Some(o) = ord else { return false };
    match op {
        Op::Eq => o == Ordering::Equal,
        Op::Ne => o != Ordering::Equal,
        Op::Lt => o == Ordering::Less,
        Op::Le => o != Ordering::Greater,
        Op::Gt => o == Ordering::Greater,
        Op::Ge => o != Ordering::Less,
        Op::Like => false,
    }
}

/// SQL `LIKE`: `%` matches any run of characters, `_` exactly one.
fn like(text: &str, pattern: &str) -> bool {
    let t: Vec<char> = text.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    // Iterative matching with backtracking to the last `%` (linear in practice).
    let (mut ti, mut pi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '_' || p[pi] == t[ti]) {
            ti += 1;
            pi += 1;
        } else if pi < p.len() && p[pi] == '%' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '%')
}

// ----- lexer ------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Ident(String),
    Literal(Literal),
    Parameter(usize),
    Op(Op),
    And,
    Or,
    Not,
    Between,
    LParen,
    RParen,
    Dot,
    LBracket,
    RBracket,
    Minus,
}

impl Kind {
    fn describe(&self) -> String {
        match self {
            Kind::Ident(s) => format!("`{s}`"),
            Kind::Literal(Literal::Str(s)) => format!("'{s}'"),
            Kind::Literal(Literal::Int(i)) => format!("{i}"),
            Kind::Literal(Literal::Float(f)) => format!("{f}"),
            Kind::Literal(Literal::Bool(b)) => (if *b { "TRUE" } else { "FALSE" }).into(),
            Kind::Parameter(n) => format!("%{n}"),
            Kind::Op(o) => format!("`{}`", op_text(*o)),
            Kind::And => "AND".into(),
            Kind::Or => "OR".into(),
            Kind::Not => "NOT".into(),
            Kind::Between => "BETWEEN".into(),
            Kind::LParen => "`(`".into(),
            Kind::RParen => "`)`".into(),
            Kind::Dot => "`.`".into(),
            Kind::LBracket => "`[`".into(),
            Kind::RBracket => "`]`".into(),
            Kind::Minus => "`-`".into(),
        }
    }
}

fn op_text(o: Op) -> &'static str {
    match o {
        Op::Eq => "=",
        Op::Ne => "<>",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        Op::Ge => ">=",
        Op::Like => "LIKE",
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Token {
    kind: Kind,
    offset: usize,
}

fn lex(src: &str) -> Result<Vec<Token>, FilterError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |offset: usize, detail: String| FilterError { offset, detail };
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => Kind::LParen,
            b')' => Kind::RParen,
            b'.' if !b.get(i + 1).is_some_and(u8::is_ascii_digit) => Kind::Dot,
            b'[' => Kind::LBracket,
            b']' => Kind::RBracket,
            b'-' => Kind::Minus,
            b'=' => Kind::Op(Op::Eq),
            b'<' => match b.get(i + 1) {
                Some(b'=') => {
                    i += 1;
                    Kind::Op(Op::Le)
                }
                Some(b'>') => {
                    i += 1;
                    Kind::Op(Op::Ne)
                }
                _ => Kind::Op(Op::Lt),
            },
            b'>' => {
                if b.get(i + 1) == Some(&b'=') {
                    i += 1;
                    Kind::Op(Op::Ge)
                } else {
                    Kind::Op(Op::Gt)
                }
            }
            b'%' => {
                let digits = b[i + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
                if digits == 0 || digits > 2 {
                    return Err(err(i, "a parameter is `%` and 0 to 99".into()));
                }
                let n: usize = src[i + 1..i + 1 + digits].parse().unwrap_or(usize::MAX);
                i += digits;
                Kind::Parameter(n)
            }
            b'\'' => {
                let mut s = String::new();
                let mut j = i + 1;
                loop {
                    match src[j..].find('\'') {
                        None => return Err(err(i, "a string is not closed by `'`".into())),
                        Some(k) => {
                            s.push_str(&src[j..j + k]);
                            j += k + 1;
                            if b.get(j) == Some(&b'\'') {
                                s.push('\'');
                                j += 1;
                            } else {
                                break;
                            }
                        }
                    }
                }
                i = j - 1;
                Kind::Literal(Literal::Str(s))
            }
            b'0'..=b'9' | b'.' => {
                let (lit, len) = number(&src[i..]).map_err(|d| err(i, d))?;
                i += len - 1;
                Kind::Literal(lit)
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let len = b[i..]
                    .iter()
                    .take_while(|d| d.is_ascii_alphanumeric() || **d == b'_')
                    .count();
                let word = &src[i..i + len];
                i += len - 1;
                match word.to_ascii_uppercase().as_str() {
                    "AND" => Kind::And,
                    "OR" => Kind::Or,
                    "NOT" => Kind::Not,
                    "BETWEEN" => Kind::Between,
                    "LIKE" => Kind::Op(Op::Like),
                    "TRUE" => Kind::Literal(Literal::Bool(true)),
                    "FALSE" => Kind::Literal(Literal::Bool(false)),
                    _ => Kind::Ident(word.to_string()),
                }
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(err(i, format!("unexpected character {ch:?}")));
            }
        };
        out.push(Token {
            kind,
            offset: start,
        });
        i += 1;
    }
    Ok(out)
}

/// A number at the start of `s`: the literal and its length in bytes.
fn number(s: &str) -> Result<(Literal, usize), String> {
    let b = s.as_bytes();
    if b.len() > 1 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X') {
        let len = 2 + b[2..].iter().take_while(|d| d.is_ascii_hexdigit()).count();
        let v = i128::from_str_radix(&s[2..len], 16)
            .map_err(|_| format!("`{}` is not a hexadecimal integer", &s[..len]))?;
        return Ok((Literal::Int(v), len));
    }
    let mut len = b.iter().take_while(|d| d.is_ascii_digit()).count();
    let mut float = false;
    if b.get(len) == Some(&b'.') {
        float = true;
        len += 1 + b[len + 1..]
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
    }
    if matches!(b.get(len), Some(b'e' | b'E')) {
        let mut j = len + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let digits = b[j.min(b.len())..]
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
        if digits > 0 {
            float = true;
            len = j + digits;
        }
    }
    let text = &s[..len];
    if float {
        text.parse::<f64>()
            .map(|f| (Literal::Float(f), len))
            .map_err(|_| format!("`{text}` is not a number"))
    } else {
        text.parse::<i128>()
            .map(|v| (Literal::Int(v), len))
            .map_err(|_| format!("`{text}` is not an integer that fits 128 bits"))
    }
}

// ----- parser -----------------------------------------------------------------------

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    end: usize,
    depth: usize,
    parameters_needed: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Kind> {
        self.tokens.get(self.at).map(|t| &t.kind)
    }

    fn offset(&self) -> usize {
        self.tokens.get(self.at).map_or(self.end, |t| t.offset)
    }

    fn found(&self) -> String {
        self.peek().map_or("the end".into(), Kind::describe)
    }

    fn fail<T>(&self, expected: &str) -> Result<T, FilterError> {
        Err(FilterError {
            offset: self.offset(),
            detail: format!("expected {expected}, found {}", self.found()),
        })
    }

    fn eat(&mut self, k: &Kind) -> bool {
        if self.peek() == Some(k) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn deeper(&mut self) -> Result<(), FilterError> {
        self.depth += 1;
        if self.depth > NESTING_MAX {
            return Err(FilterError {
                offset: self.offset(),
                detail: format!("nested deeper than {NESTING_MAX} (NESTING_MAX)"),
            });
        }
        Ok(())
    }

    /// condition := and ( OR and )*
    fn condition(&mut self) -> Result<Condition, FilterError> {
        let mut c = self.and()?;
        while self.eat(&Kind::Or) {
            c = Condition::Or(Box::new(c), Box::new(self.and()?));
        }
        Ok(c)
    }

    /// and := unary ( AND unary )*
    fn and(&mut self) -> Result<Condition, FilterError> {
        let mut c = self.unary()?;
        while self.eat(&Kind::And) {
            c = Condition::And(Box::new(c), Box::new(self.unary()?));
        }
        Ok(c)
    }

    /// unary := NOT unary | ( condition ) | predicate
    fn unary(&mut self) -> Result<Condition, FilterError> {
        if self.eat(&Kind::Not) {
            self.deeper()?;
            let c = Condition::Not(Box::new(self.unary()?));
            self.depth -= 1;
            return Ok(c);
        }
        if self.eat(&Kind::LParen) {
            self.deeper()?;
            let c = self.condition()?;
            if !self.eat(&Kind::RParen) {
                return self.fail("`)`");
            }
            self.depth -= 1;
            return Ok(c);
        }
        self.predicate()
    }

    /// predicate := operand op operand | operand [NOT] BETWEEN operand AND operand
    fn predicate(&mut self) -> Result<Condition, FilterError> {
        let left = self.operand()?;
        let negated = self.eat(&Kind::Not);
        if self.eat(&Kind::Between) {
            let low = self.operand()?;
            if !self.eat(&Kind::And) {
                return self.fail("AND between the bounds of BETWEEN");
            }
            let high = self.operand()?;
            return Ok(Condition::Between {
                value: left,
                low,
                high,
                negated,
            });
        }
        if negated {
            return self.fail("BETWEEN after NOT");
        }
        let op = match self.peek() {
            Some(Kind::Op(o)) => *o,
            _ => return self.fail("a comparison (=, <>, <, <=, >, >=, LIKE) or BETWEEN"),
        };
        let op_offset = self.offset();
        self.at += 1;
        let right = self.operand()?;
        if matches!(
            (&left, &right),
            (
                Operand::Literal(_) | Operand::Parameter(_),
                Operand::Literal(_) | Operand::Parameter(_)
            )
        ) {
            return Err(FilterError {
                offset: op_offset,
                detail: "a comparison needs a member on at least one side".into(),
            });
        }
        Ok(Condition::Compare(left, op, right))
    }

    /// operand := member | literal | -number | %n
    fn operand(&mut self) -> Result<Operand, FilterError> {
        match self.peek().cloned() {
            Some(Kind::Literal(l)) => {
                self.at += 1;
                Ok(Operand::Literal(l))
            }
            Some(Kind::Minus) => {
                self.at += 1;
                match self.peek().cloned() {
                    Some(Kind::Literal(l)) => match negate(&l) {
                        Some(n) => {
                            self.at += 1;
                            Ok(Operand::Literal(n))
                        }
                        None => self.fail("a number after `-`"),
                    },
                    _ => self.fail("a number after `-`"),
                }
            }
            Some(Kind::Parameter(n)) => {
                self.at += 1;
                self.parameters_needed = self.parameters_needed.max(n + 1);
                Ok(Operand::Parameter(n))
            }
            Some(Kind::Ident(name)) => {
                self.at += 1;
                let mut path = vec![Step::Name(name)];
                loop {
                    if self.eat(&Kind::Dot) {
                        match self.peek().cloned() {
                            Some(Kind::Ident(n)) => {
                                self.at += 1;
                                path.push(Step::Name(n));
                            }
                            _ => return self.fail("a member name after `.`"),
                        }
                    } else if self.eat(&Kind::LBracket) {
                        match self.peek().cloned() {
                            Some(Kind::Literal(Literal::Int(i))) if i >= 0 => {
                                self.at += 1;
                                path.push(Step::Index(usize::try_from(i).unwrap_or(usize::MAX)));
                            }
                            _ => return self.fail("an index (0 or more) in `[ ]`"),
                        }
                        if !self.eat(&Kind::RBracket) {
                            return self.fail("`]`");
                        }
                    } else {
                        break;
                    }
                }
                Ok(Operand::Member(path))
            }
            _ => self.fail("a value"),
        }
    }
}
