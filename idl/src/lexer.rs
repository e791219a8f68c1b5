//! Source files, the tokenizer and the preprocessor (`#include`, `#define`, conditionals).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::error::{Diagnostic, Error, Result};

/// Deepest `#include` nesting.
pub const INCLUDE_DEPTH_MAX: usize = 64;
/// Deepest nesting of `#define` expansions.
pub const MACRO_DEPTH_MAX: usize = 32;
/// Deepest `#if` nesting.
pub const CONDITIONAL_DEPTH_MAX: usize = 256;
/// Most tokens one compilation may produce after macro expansion and includes.
pub const TOKENS_MAX: usize = 1 << 22;
/// Largest source file read.
pub const SOURCE_LEN_MAX: usize = 64 * 1024 * 1024;

/// A position: file index in [`Sources`], 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Index in [`Sources::files`].
    pub file: usize,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (characters).
    pub col: usize,
}

/// One source file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Name shown in diagnostics.
    pub name: String,
    /// Path it was read from (canonical when it exists on disk).
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// Every file read in one compilation, for diagnostics.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The files, in the order read.
    pub files: Vec<SourceFile>,
}

impl Sources {
    /// Adds a file and returns its index.
    pub fn add(&mut self, name: String, path: PathBuf, text: String) -> usize {
        self.files.push(SourceFile { name, path, text });
        self.files.len() - 1
    }

    /// Builds the error for `pos`.
    pub fn error(&self, pos: Pos, message: impl Into<String>) -> Error {
        let (file, source_line) = match self.files.get(pos.file) {
            Some(f) => (
                f.name.clone(),
                f.text
                    .lines()
                    .nth(pos.line.saturating_sub(1))
                    .unwrap_or("")
                    .to_string(),
            ),
            None => ("<unknown>".to_string(), String::new()),
        };
        Error::Idl(Box::new(Diagnostic {
            file,
            line: pos.line,
            col: pos.col,
            message: message.into(),
            source_line,
        }))
    }
}

/// What a token is.
#[derive(Debug, Clone, PartialEq)]
pub enum TokKind {
    /// An identifier or keyword.
    Ident(String),
    /// An integer literal.
    Int(u128),
    /// A floating-point literal.
    Float(f64),
    /// A fixed-point literal (`1.5d`): rejected by the parser.
    Fixed,
    /// A string literal (escapes resolved).
    Str(String),
    /// A character literal.
    Char(char),
    /// Punctuation.
    Punct(&'static str),
    /// A preprocessor line: the text after `#` (comments removed).
    Directive(String),
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Tok {
    /// What it is.
    pub kind: TokKind,
    /// Where it starts.
    pub pos: Pos,
}

const PUNCTS: [&str; 30] = [
    "::", "<<", ">>", "&&", "||", "==", "!=", "{", "}", "(", ")", "[", "]", "<", ">", ";", ":",
    ",", "=", "+", "-", "*", "/", "%", "~", "&", "|", "^", "@", "!",
];

struct Lexer<'a> {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
    file: usize,
    sources: &'a Sources,
    /// Only whitespace seen since the start of the line: a `#` starts a directive.
    line_start: bool,
}

/// Tokenizes one file's text.
pub fn tokenize(sources: &Sources, file: usize) -> Result<Vec<Tok>> {
    let text = sources
        .files
        .get(file)
        .map(|f| f.text.as_str())
        .unwrap_or("");
    let mut lx = Lexer {
        chars: text.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
        file,
        sources,
        line_start: true,
    };
    lx.run()
}

/// Tokenizes a directive's text (for `#if` expressions and `#define` bodies); `pos` is
/// where the text starts.
fn tokenize_fragment(sources: &Sources, text: &str, pos: Pos) -> Result<Vec<Tok>> {
    let mut lx = Lexer {
        chars: text.chars().collect(),
        i: 0,
        line: pos.line,
        col: pos.col,
        file: pos.file,
        sources,
        line_start: false,
    };
    lx.run()
}

impl Lexer<'_> {
    fn peek(&self, k: usize) -> Option<char> {
        self.chars.get(self.i + k).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.get(self.i).copied()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
            self.line_start = true;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn pos(&self) -> Pos {
        Pos {
            file: self.file,
            line: self.line,
            col: self.col,
        }
    }

    fn err(&self, pos: Pos, msg: impl Into<String>) -> Error {
        self.sources.error(pos, msg)
    }

    fn run(&mut self) -> Result<Vec<Tok>> {
        let mut out = Vec::new();
        while let Some(c) = self.peek(0) {
            let pos = self.pos();
            if c.is_whitespace() {
                self.bump();
                continue;
            }
            if c == '/' && self.peek(1) == Some('/') {
                while let Some(c) = self.peek(0) {
                    if c == '\n' {
                        break;
                    }
                    self.bump();
                }
                continue;
            }
            if c == '/' && self.peek(1) == Some('*') {
                self.bump();
                self.bump();
                loop {
                    match self.peek(0) {
                        None => return Err(self.err(pos, "unterminated comment: expected `*/`")),
                        Some('*') if self.peek(1) == Some('/') => {
                            self.bump();
                            self.bump();
                            break;
                        }
                        Some(_) => {
                            self.bump();
                        }
                    }
                }
                continue;
            }
            if c == '#' {
                if !self.line_start {
                    return Err(self.err(pos, "`#` must start a line (a preprocessor directive)"));
                }
                self.bump();
                let mut text = String::new();
                while let Some(c) = self.peek(0) {
                    if c == '\n' {
                        break;
                    }
                    // Line continuation.
                    if c == '\\' && self.peek(1) == Some('\n') {
                        self.bump();
                        self.bump();
                        text.push(' ');
                        continue;
                    }
                    text.push(c);
                    self.bump();
                }
                out.push(Tok {
                    kind: TokKind::Directive(strip_comment(&text)),
                    pos,
                });
                continue;
            }
            self.line_start = false;
            let kind = if c.is_ascii_alphabetic() || c == '_' {
                if c == 'L' && matches!(self.peek(1), Some('"') | Some('\'')) {
                    self.bump();
                    self.literal(pos)?
                } else {
                    let mut s = String::new();
                    while let Some(c) = self.peek(0) {
                        if c.is_ascii_alphanumeric() || c == '_' {
                            s.push(c);
                            self.bump();
                        } else {
                            break;
                        }
                    }
                    TokKind::Ident(s)
                }
            } else if c.is_ascii_digit()
                || (c == '.' && self.peek(1).is_some_and(|d| d.is_ascii_digit()))
            {
                self.number(pos)?
            } else if c == '"' || c == '\'' {
                self.literal(pos)?
            } else {
                let rest: String = self.chars[self.i..].iter().take(2).collect();
                match PUNCTS.iter().find(|p| rest.starts_with(**p)) {
                    Some(p) => {
                        for _ in 0..p.len() {
                            self.bump();
                        }
                        TokKind::Punct(p)
                    }
                    None => {
                        return Err(self.err(pos, format!("unexpected character {c:?}")));
                    }
                }
            };
            out.push(Tok { kind, pos });
        }
        Ok(out)
    }

    fn number(&mut self, pos: Pos) -> Result<TokKind> {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            let exp_sign = (c == '+' || c == '-')
                && matches!(s.chars().last(), Some('e') | Some('E'))
                && !s.starts_with("0x")
                && !s.starts_with("0X");
            if c.is_ascii_alphanumeric() || c == '.' || exp_sign {
                s.push(c);
                self.bump();
            } else {
                break;
            }
        }
        let bad = || self.err(pos, format!("malformed number `{s}`"));
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            return u128::from_str_radix(hex, 16)
                .map(TokKind::Int)
                .map_err(|_| bad());
        }
        if s.ends_with('d') || s.ends_with('D') {
            return Ok(TokKind::Fixed);
        }
        if s.contains(['.', 'e', 'E']) {
            return s.parse::<f64>().map(TokKind::Float).map_err(|_| bad());
        }
        if s.len() > 1 && s.starts_with('0') {
            return u128::from_str_radix(&s[1..], 8)
                .map(TokKind::Int)
                .map_err(|_| bad());
        }
        if s.chars().all(|c| c.is_ascii_digit()) {
            return s
                .parse::<u128>()
                .map(TokKind::Int)
                .map_err(|_| self.err(pos, format!("integer literal `{s}` is too large")));
        }
        Err(bad())
    }

    fn escape(&mut self, pos: Pos) -> Result<char> {
        let Some(c) = self.bump() else {
            return Err(self.err(pos, "unterminated literal"));
        };
        Ok(match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'v' => '\u{b}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'a' => '\u{7}',
            '0'..='7' => {
                let mut v = c.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match self.peek(0).and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            self.bump();
                        }
                        None => break,
                    }
                }
                char::from_u32(v).ok_or_else(|| self.err(pos, "bad octal escape"))?
            }
            'x' | 'u' => {
                let max = if c == 'x' { 2 } else { 4 };
                let mut v = 0u32;
                let mut n = 0;
                while n < max {
                    match self.peek(0).and_then(|d| d.to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            self.bump();
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n == 0 {
                    return Err(self.err(pos, format!("`\\{c}` escape needs hex digits")));
                }
                char::from_u32(v).ok_or_else(|| self.err(pos, "escape is not a character"))?
            }
            '\\' | '\'' | '"' | '?' => c,
            other => return Err(self.err(pos, format!("unknown escape `\\{other}`"))),
        })
    }

    fn literal(&mut self, pos: Pos) -> Result<TokKind> {
        let quote = self.bump().unwrap_or('"');
        let mut s = String::new();
        loop {
            match self.peek(0) {
                None | Some('\n') => {
                    let what = if quote == '"' { "string" } else { "character" };
                    return Err(self.err(pos, format!("unterminated {what} literal")));
                }
                Some(c) if c == quote => {
                    self.bump();
                    break;
                }
                Some('\\') => {
                    self.bump();
                    let c = self.escape(pos)?;
                    s.push(c);
                }
                Some(c) => {
                    self.bump();
                    s.push(c);
                }
            }
        }
        if quote == '"' {
            return Ok(TokKind::Str(s));
        }
        let mut it = s.chars();
        match (it.next(), it.next()) {
            (Some(c), None) => Ok(TokKind::Char(c)),
            _ => Err(self.err(pos, "a character literal holds exactly one character")),
        }
    }
}

/// Removes a `//` or `/* */` comment from a directive line (outside quotes).
fn strip_comment(text: &str) -> String {
    let mut out = String::new();
    let mut in_quote = false;
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            in_quote = !in_quote;
        }
        if !in_quote && c == '/' && chars.get(i + 1) == Some(&'/') {
            break;
        }
        if !in_quote && c == '/' && chars.get(i + 1) == Some(&'*') {
            // Skip to the closing `*/` on this line (or drop the rest).
            let mut j = i + 2;
            while j + 1 < chars.len() && !(chars[j] == '*' && chars[j + 1] == '/') {
                j += 1;
            }
            i = j + 2;
            out.push(' ');
            continue;
        }
        out.push(c);
        i += 1;
    }
    out.trim_end().to_string()
}

/// One open `#if`.
struct Cond {
    /// Where it opened, for "unterminated" errors.
    pos: Pos,
    /// The enclosing region is active.
    parent_active: bool,
    /// This branch is taken.
    taking: bool,
    /// Some branch was taken already.
    done: bool,
    /// `#else` seen.
    seen_else: bool,
}

/// The preprocessor: reads files, follows includes, applies conditionals and macros.
pub struct Preprocessor<'a> {
    /// Files read.
    pub sources: &'a mut Sources,
    include_dirs: Vec<PathBuf>,
    macros: HashMap<String, Vec<Tok>>,
    included: HashSet<PathBuf>,
}

impl std::fmt::Debug for Preprocessor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preprocessor")
            .field("include_dirs", &self.include_dirs)
            .finish_non_exhaustive()
    }
}

/// Reads an IDL file: `NotFound` if there is none, and for a directory, a file over
/// `SOURCE_LEN_MAX` bytes or text that is not UTF-8 an error saying which (for text, the
/// line and column of the first bad byte).
pub fn read_source(path: &Path) -> Result<String> {
    let io = |source: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let invalid = |why: String| io(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotFound {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    if meta.is_dir() {
        return Err(invalid("a directory, not an IDL file".into()));
    }
    if !meta.is_file() {
        return Err(invalid("not a regular file".into()));
    }
    if meta.len() > SOURCE_LEN_MAX as u64 {
        return Err(invalid(format!(
            "{} bytes; an IDL file is at most {SOURCE_LEN_MAX}",
            meta.len()
        )));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..at];
        let line = 1 + before.iter().filter(|b| **b == b'\n').count();
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        // Columns count characters, as the diagnostics do.
        let column = 1 + String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count();
        invalid(format!(
            "line {line}, column {column}: not UTF-8 text (byte {at} is {:#04x})",
            e.as_bytes()[at]
        ))
    })
}

impl<'a> Preprocessor<'a> {
    /// A preprocessor searching `include_dirs` for `#include`s.
    pub fn new(sources: &'a mut Sources, include_dirs: &[PathBuf]) -> Self {
        Preprocessor {
            sources,
            include_dirs: include_dirs.to_vec(),
            macros: HashMap::new(),
            included: HashSet::new(),
        }
    }

    /// Preprocesses the file already added as `file`.
    pub fn run(&mut self, file: usize) -> Result<Vec<Tok>> {
        let mut out = Vec::new();
        if let Some(f) = self.sources.files.get(file) {
            let key = f.path.canonicalize().unwrap_or_else(|_| f.path.clone());
            self.included.insert(key);
        }
        self.file(file, 0, &mut out)?;
        Ok(out)
    }

    fn file(&mut self, file: usize, depth: usize, out: &mut Vec<Tok>) -> Result<()> {
        let toks = tokenize(self.sources, file)?;
        let mut conds: Vec<Cond> = Vec::new();
        for tok in toks {
            let active = match conds.last() {
                Some(c) => c.parent_active && c.taking,
                None => true,
            };
            match &tok.kind {
                TokKind::Directive(text) => {
                    self.directive(text, tok.pos, active, &mut conds, depth, out)?;
                }
                _ if !active => {}
                TokKind::Ident(name) if self.macros.contains_key(name) => {
                    self.expand(&tok, 0, out)?;
                }
                _ => {
                    if out.len() >= TOKENS_MAX {
                        return Err(self
                            .sources
                            .error(tok.pos, format!("more than {TOKENS_MAX} tokens")));
                    }
                    out.push(tok)
                }
            }
        }
        if let Some(c) = conds.last() {
            return Err(self.sources.error(
                c.pos,
                "unterminated conditional: expected `#endif` before the end of the file",
            ));
        }
        Ok(())
    }

    fn expand(&self, tok: &Tok, depth: usize, out: &mut Vec<Tok>) -> Result<()> {
        let name = match &tok.kind {
            TokKind::Ident(n) => n,
            _ => {
                out.push(tok.clone());
                return Ok(());
            }
        };
        let Some(body) = self.macros.get(name) else {
            out.push(tok.clone());
            return Ok(());
        };
        if out.len() >= TOKENS_MAX {
            return Err(self.sources.error(
                tok.pos,
                format!("more than {TOKENS_MAX} tokens after expanding `{name}`"),
            ));
        }
        if depth >= MACRO_DEPTH_MAX {
            return Err(self.sources.error(
                tok.pos,
                format!("expansion of `{name}` is nested too deeply (recursive #define?)"),
            ));
        }
        for t in body {
            // Expanded tokens report the place of use.
            let t = Tok {
                kind: t.kind.clone(),
                pos: tok.pos,
            };
            self.expand(&t, depth + 1, out)?;
        }
        Ok(())
    }

    fn directive(
        &mut self,
        text: &str,
        pos: Pos,
        active: bool,
        conds: &mut Vec<Cond>,
        depth: usize,
        out: &mut Vec<Tok>,
    ) -> Result<()> {
        let trimmed = text.trim_start();
        let lead = text.len() - trimmed.len();
        let name: String = trimmed
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let rest = &trimmed[name.len()..];
        // Column of `rest` in the line: `#`, leading blanks, the name.
        let rest_pos = Pos {
            col: pos.col + 1 + lead + name.len(),
            ..pos
        };
        let err = |msg: String| self.sources.error(pos, msg);
        match name.as_str() {
            "ifdef" | "ifndef" => {
                let toks = tokenize_fragment(self.sources, rest, rest_pos)?;
                let ident = match toks.as_slice() {
                    [Tok {
                        kind: TokKind::Ident(n),
                        ..
                    }] => n.clone(),
                    _ => return Err(err(format!("`#{name}` expects one macro name"))),
                };
                let defined = self.macros.contains_key(&ident);
                let taking = if name == "ifdef" { defined } else { !defined };
                self.push_cond(conds, pos, active, taking)?;
            }
            "if" => {
                let taking = if active {
                    self.condition(rest, rest_pos)?
                } else {
                    false
                };
                self.push_cond(conds, pos, active, taking)?;
            }
            "elif" => {
                let Some(c) = conds.last() else {
                    return Err(err("`#elif` without `#if`".into()));
                };
                if c.seen_else {
                    return Err(err("`#elif` after `#else`".into()));
                }
                let (parent_active, done) = (c.parent_active, c.done);
                let taking = if parent_active && !done {
                    self.condition(rest, rest_pos)?
                } else {
                    false
                };
                if let Some(c) = conds.last_mut() {
                    c.taking = taking;
                    c.done |= taking;
                }
            }
            "else" => {
                let Some(c) = conds.last_mut() else {
                    return Err(err("`#else` without `#if`".into()));
                };
                if c.seen_else {
                    return Err(err("second `#else` for the same `#if`".into()));
                }
                c.seen_else = true;
                c.taking = !c.done;
                c.done = true;
            }
            "endif" => {
                if conds.pop().is_none() {
                    return Err(err("`#endif` without `#if`".into()));
                }
            }
            _ if !active => {}
            "define" => {
                let toks = tokenize_fragment(self.sources, rest, rest_pos)?;
                let Some(Tok {
                    kind: TokKind::Ident(macro_name),
                    pos: name_pos,
                }) = toks.first().cloned()
                else {
                    return Err(err("`#define` expects a macro name".into()));
                };
                if let Some(t) = toks.get(1) {
                    if t.kind == TokKind::Punct("(") && t.pos.col == name_pos.col + macro_name.len()
                    {
                        return Err(self.sources.error(
                            t.pos,
                            "function-like macros are not supported: only `#define NAME value`",
                        ));
                    }
                }
                self.macros.insert(macro_name, toks[1..].to_vec());
            }
            "undef" => {
                let toks = tokenize_fragment(self.sources, rest, rest_pos)?;
                match toks.as_slice() {
                    [Tok {
                        kind: TokKind::Ident(n),
                        ..
                    }] => {
                        self.macros.remove(n);
                    }
                    _ => return Err(err("`#undef` expects one macro name".into())),
                }
            }
            "include" => self.include(rest.trim(), pos, depth, out)?,
            "pragma" | "" | "line" => {}
            "error" => return Err(err(format!("#error{rest}"))),
            "warning" => {}
            other => {
                return Err(err(format!(
                    "unknown preprocessor directive `#{other}` (expected include, define, undef, ifdef, ifndef, if, elif, else, endif or pragma)"
                )))
            }
        }
        Ok(())
    }

    fn push_cond(&self, conds: &mut Vec<Cond>, pos: Pos, active: bool, taking: bool) -> Result<()> {
        if conds.len() >= CONDITIONAL_DEPTH_MAX {
            return Err(self
                .sources
                .error(pos, "conditionals are nested too deeply"));
        }
        conds.push(Cond {
            pos,
            parent_active: active,
            taking,
            done: taking,
            seen_else: false,
        });
        Ok(())
    }

    fn include(&mut self, spec: &str, pos: Pos, depth: usize, out: &mut Vec<Tok>) -> Result<()> {
        let (name, quoted) =
            if let Some(s) = spec.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                (s, true)
            } else if let Some(s) = spec.strip_prefix('<').and_then(|s| s.strip_suffix('>')) {
                (s, false)
            } else {
                return Err(self
                    .sources
                    .error(pos, "`#include` expects \"file\" or <file>"));
            };
        if depth + 1 >= INCLUDE_DEPTH_MAX {
            return Err(self.sources.error(pos, "includes are nested too deeply"));
        }
        let mut candidates = Vec::new();
        if quoted {
            if let Some(dir) = self
                .sources
                .files
                .get(pos.file)
                .and_then(|f| f.path.parent())
            {
                candidates.push(dir.join(name));
            }
        }
        candidates.extend(self.include_dirs.iter().map(|d| d.join(name)));
        let Some(found) = candidates.into_iter().find(|p| p.is_file()) else {
            let dirs: Vec<String> = self
                .include_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            return Err(self.sources.error(
                pos,
                format!(
                    "cannot find include file `{name}` (searched {}{})",
                    if quoted {
                        "the including file's directory, "
                    } else {
                        ""
                    },
                    if dirs.is_empty() {
                        "no include directories; add one with -I".to_string()
                    } else {
                        dirs.join(", ")
                    }
                ),
            ));
        };
        let key = found.canonicalize().unwrap_or_else(|_| found.clone());
        // Cycle and duplicate guard: every file is read once per compilation.
        if !self.included.insert(key.clone()) {
            return Ok(());
        }
        let text = read_source(&found).map_err(|e| {
            self.sources
                .error(pos, format!("cannot read `{name}`: {e}"))
        })?;
        let idx = self.sources.add(found.display().to_string(), key, text);
        self.file(idx, depth + 1, out)
    }

    /// Evaluates an `#if` expression: integers, macro names, `defined`, `!`, `&&`, `||`,
    /// comparisons, parentheses.
    fn condition(&self, text: &str, pos: Pos) -> Result<bool> {
        let toks = tokenize_fragment(self.sources, text, pos)?;
        let mut p = CondParser {
            toks: &toks,
            i: 0,
            pp: self,
            pos,
            depth: 0,
        };
        let v = p.or()?;
        if let Some(t) = toks.get(p.i) {
            return Err(self
                .sources
                .error(t.pos, "unexpected token in `#if` expression"));
        }
        Ok(v != 0)
    }
}

struct CondParser<'t, 'p, 'a> {
    toks: &'t [Tok],
    i: usize,
    pp: &'p Preprocessor<'a>,
    pos: Pos,
    depth: usize,
}

impl CondParser<'_, '_, '_> {
    fn peek(&self) -> Option<&TokKind> {
        self.toks.get(self.i).map(|t| &t.kind)
    }

    fn here(&self) -> Pos {
        self.toks.get(self.i).map_or(self.pos, |t| t.pos)
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(TokKind::Punct(q)) if *q == p) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<i128> {
        let mut v = self.and()?;
        while self.eat("||") {
            let r = self.and()?;
            v = i128::from(v != 0 || r != 0);
        }
        Ok(v)
    }

    fn and(&mut self) -> Result<i128> {
        let mut v = self.cmp()?;
        while self.eat("&&") {
            let r = self.cmp()?;
            v = i128::from(v != 0 && r != 0);
        }
        Ok(v)
    }

    fn cmp(&mut self) -> Result<i128> {
        let v = self.unary()?;
        if self.eat("==") {
            return Ok(i128::from(v == self.unary()?));
        }
        if self.eat("!=") {
            return Ok(i128::from(v != self.unary()?));
        }
        if self.eat("<") {
            return Ok(i128::from(v < self.unary()?));
        }
        if self.eat(">") {
            return Ok(i128::from(v > self.unary()?));
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<i128> {
        self.depth += 1;
        if self.depth > MACRO_DEPTH_MAX {
            return Err(self
                .pp
                .sources
                .error(self.here(), "`#if` expression nested too deeply"));
        }
        let r = if self.eat("!") {
            self.unary().map(|v| i128::from(v == 0))
        } else if self.eat("-") {
            self.unary().map(|v| v.wrapping_neg())
        } else {
            self.primary()
        };
        self.depth -= 1;
        r
    }

    fn primary(&mut self) -> Result<i128> {
        let pos = self.here();
        let err = |m: &str| self.pp.sources.error(pos, m.to_string());
        match self.peek().cloned() {
            Some(TokKind::Int(v)) => {
                self.i += 1;
                i128::try_from(v).map_err(|_| err("number too large in `#if`"))
            }
            Some(TokKind::Punct("(")) => {
                self.i += 1;
                let v = self.or()?;
                if !self.eat(")") {
                    return Err(self
                        .pp
                        .sources
                        .error(self.here(), "expected `)` in `#if` expression"));
                }
                Ok(v)
            }
            Some(TokKind::Ident(n)) if n == "defined" => {
                self.i += 1;
                let paren = self.eat("(");
                let name = match self.peek().cloned() {
                    Some(TokKind::Ident(n)) => n,
                    _ => {
                        return Err(self
                            .pp
                            .sources
                            .error(self.here(), "`defined` expects a macro name"))
                    }
                };
                self.i += 1;
                if paren && !self.eat(")") {
                    return Err(self
                        .pp
                        .sources
                        .error(self.here(), "expected `)` after `defined(NAME`"));
                }
                Ok(i128::from(self.pp.macros.contains_key(&name)))
            }
            Some(TokKind::Ident(n)) => {
                self.i += 1;
                match self.pp.macros.get(&n).map(|b| b.as_slice()) {
                    Some(
                        [Tok {
                            kind: TokKind::Int(v),
                            ..
                        }],
                    ) => i128::try_from(*v).map_err(|_| err("number too large in `#if`")),
                    // Undefined (or non-numeric) names are 0, as in C.
                    _ => Ok(0),
                }
            }
            _ => Err(err(
                "expected a number, a macro name, `defined(NAME)` or `(` in `#if` expression",
            )),
        }
    }
}

/// Writes preprocessed tokens back as IDL text that reads as the same tokens: what a
/// generated file carries so run-time type descriptions need no include paths.
/// Directives (all consumed by the preprocessor) are left out; a line ends after each `;`.
pub fn to_source(toks: &[Tok]) -> String {
    let mut out = String::new();
    for t in toks {
        let text = match &t.kind {
            TokKind::Ident(s) => s.clone(),
            TokKind::Int(v) => v.to_string(),
            TokKind::Float(v) => format!("{v:?}"),
            // The parser refuses fixed-point literals before code is generated.
            TokKind::Fixed => "0.0d".into(),
            TokKind::Str(s) => quoted(s, '"'),
            TokKind::Char(c) => quoted(&c.to_string(), '\''),
            TokKind::Punct(p) => (*p).to_string(),
            TokKind::Directive(_) => continue,
        };
        if !out.is_empty() && !out.ends_with('\n') {
            out.push(' ');
        }
        out.push_str(&text);
        if text == ";" {
            out.push('\n');
        }
    }
    out
}

/// An IDL literal of `s` between `quote`s, escaped so the lexer reads `s` back.
fn quoted(s: &str, quote: char) -> String {
    let mut out = String::from(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' | '\'' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}
