//! The parser: tokens to a resolved, checked [`Item`] tree, with name resolution and
//! constant evaluation done as declarations are read (IDL declares before use).

use std::collections::HashMap;

use crate::ast::{Branch, Const, Enum, Item, Member, Scoped, Struct, Type, Typedef, Union, Value};
use crate::error::{Error, Result};
use crate::lexer::{Pos, Sources, Tok, TokKind};

/// Deepest nesting of modules, types and expressions.
pub const NESTING_MAX: usize = 64;
/// Largest array dimension or string/sequence bound.
pub const BOUND_MAX: u64 = u32::MAX as u64;

/// What a declared name is.
#[derive(Debug, Clone, PartialEq)]
pub enum Sym {
    Module,
    /// Forward-declared struct or union, not defined yet.
    Forward,
    Struct,
    Union,
    Enum,
    Typedef(Type),
    Const(Type, Value),
    Enumerator(Scoped, u32),
}

/// The parse result: items and the symbol table.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub items: Vec<Item>,
    pub symbols: HashMap<String, Sym>,
    pub structs: HashMap<String, Struct>,
    pub unions: HashMap<String, Union>,
    pub enums: HashMap<String, Enum>,
}

const KEYWORDS: &[&str] = &[
    "abstract",
    "any",
    "alias",
    "attribute",
    "bitfield",
    "bitmask",
    "bitset",
    "boolean",
    "case",
    "char",
    "component",
    "connector",
    "const",
    "consumes",
    "context",
    "custom",
    "default",
    "double",
    "exception",
    "emits",
    "enum",
    "eventtype",
    "factory",
    "FALSE",
    "finder",
    "fixed",
    "float",
    "getraises",
    "getter",
    "home",
    "import",
    "in",
    "inout",
    "interface",
    "local",
    "long",
    "manages",
    "map",
    "mirrorport",
    "module",
    "multiple",
    "native",
    "Object",
    "octet",
    "oneway",
    "out",
    "primarykey",
    "private",
    "port",
    "porttype",
    "provides",
    "public",
    "publishes",
    "raises",
    "readonly",
    "setraises",
    "setter",
    "sequence",
    "short",
    "string",
    "struct",
    "supports",
    "switch",
    "TRUE",
    "truncatable",
    "typedef",
    "typeid",
    "typename",
    "typeprefix",
    "unsigned",
    "union",
    "uses",
    "ValueBase",
    "valuetype",
    "void",
    "wchar",
    "wstring",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
];

pub fn join(s: &[String]) -> String {
    s.join("::")
}

#[derive(Default)]
struct Annotations {
    key: bool,
    optional: bool,
    id: Option<u32>,
    value: Option<u32>,
    bit_bound: Option<u32>,
}

pub struct Parser<'a> {
    toks: &'a [Tok],
    i: usize,
    sources: &'a Sources,
    scope: Vec<String>,
    depth: usize,
    spec: Spec,
    /// Where each name was defined, for "already defined" errors.
    defined_at: HashMap<String, Pos>,
    /// Uses of forward-declared types (inside sequences): must be defined by the end.
    forward_uses: Vec<(String, Pos)>,
    /// The first `>` of a `>>` token was consumed.
    half_angle: bool,
    /// Inside `<...>` (not in parentheses): `>>` closes brackets instead of shifting.
    in_angle: bool,
}

/// Parses a token stream.
pub fn parse(toks: &[Tok], sources: &Sources) -> Result<Spec> {
    let mut p = Parser {
        toks,
        i: 0,
        sources,
        scope: Vec::new(),
        depth: 0,
        spec: Spec::default(),
        defined_at: HashMap::new(),
        forward_uses: Vec::new(),
        half_angle: false,
        in_angle: false,
    };
    let mut items = Vec::new();
    while p.i < toks.len() {
        p.definition(&mut items)?;
    }
    for (name, pos) in std::mem::take(&mut p.forward_uses) {
        if p.spec.symbols.get(&name) == Some(&Sym::Forward) {
            return Err(p.err_at(
                pos,
                format!("`{name}` is forward-declared but never defined"),
            ));
        }
    }
    p.spec.items = items;
    Ok(p.spec)
}

fn describe(t: Option<&Tok>) -> String {
    match t.map(|t| &t.kind) {
        None => "the end of the input".into(),
        Some(TokKind::Ident(s)) => format!("`{s}`"),
        Some(TokKind::Int(v)) => format!("number `{v}`"),
        Some(TokKind::Float(v)) => format!("number `{v}`"),
        Some(TokKind::Fixed) => "a fixed-point literal".into(),
        Some(TokKind::Str(s)) => format!("string {s:?}"),
        Some(TokKind::Char(c)) => format!("character {c:?}"),
        Some(TokKind::Punct(p)) => format!("`{p}`"),
        Some(TokKind::Directive(_)) => "a directive".into(),
    }
}

impl Parser<'_> {
    fn peek(&self) -> Option<&TokKind> {
        self.toks.get(self.i).map(|t| &t.kind)
    }

    fn pos(&self) -> Pos {
        match self.toks.get(self.i) {
            Some(t) => t.pos,
            // At the end: just after the last token.
            None => self.toks.last().map_or(
                Pos {
                    file: 0,
                    line: 1,
                    col: 1,
                },
                |t| Pos {
                    col: t.pos.col + 1,
                    ..t.pos
                },
            ),
        }
    }

    fn err_at(&self, pos: Pos, msg: impl Into<String>) -> Error {
        self.sources.error(pos, msg)
    }

    fn err(&self, msg: impl Into<String>) -> Error {
        self.err_at(self.pos(), msg)
    }

    fn expected(&self, what: &str) -> Error {
        self.err(format!(
            "expected {what}, found {}",
            describe(self.toks.get(self.i))
        ))
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(TokKind::Punct(q)) if *q == p)
    }

    fn is_kw(&self, k: &str) -> bool {
        matches!(self.peek(), Some(TokKind::Ident(s)) if s == k)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn eat_kw(&mut self, k: &str) -> bool {
        if self.is_kw(k) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, p: &str, ctx: &str) -> Result<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{p}` {ctx}")))
        }
    }

    /// `>` that may be the first half of a `>>` token (nested template brackets).
    fn expect_close_angle(&mut self) -> Result<()> {
        if self.eat_punct(">") {
            return Ok(());
        }
        if self.is_punct(">>") {
            // `>>` closes two brackets: the first half now, the second on the next call.
            if self.half_angle {
                self.half_angle = false;
                self.i += 1;
            } else {
                self.half_angle = true;
            }
            return Ok(());
        }
        Err(self.expected("`>`"))
    }

    fn ident(&mut self, what: &str) -> Result<(String, Pos)> {
        let pos = self.pos();
        match self.peek() {
            Some(TokKind::Ident(s)) if KEYWORDS.contains(&s.as_str()) => Err(self.err(format!(
                "expected {what}, found keyword `{s}` (keywords cannot be names)"
            ))),
            Some(TokKind::Ident(s)) => {
                let s = s.trim_start_matches('_').to_string();
                if s.is_empty() {
                    return Err(self.err(format!("expected {what}, found `_`")));
                }
                self.i += 1;
                Ok((s, pos))
            }
            _ => Err(self.expected(what)),
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > NESTING_MAX {
            return Err(self.err(format!("nested more than {NESTING_MAX} levels deep")));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn scoped(&self, name: &str) -> Scoped {
        let mut s = self.scope.clone();
        s.push(name.to_string());
        s
    }

    /// Declares `name` in the current scope.
    fn declare(&mut self, name: &str, pos: Pos, sym: Sym) -> Result<Scoped> {
        let full = self.scoped(name);
        let key = join(&full);
        if let Some(old) = self.spec.symbols.get(&key) {
            let ok = matches!(
                (old, &sym),
                (Sym::Module, Sym::Module)
                    | (Sym::Forward, Sym::Forward)
                    | (Sym::Forward, Sym::Struct)
                    | (Sym::Forward, Sym::Union)
                    | (Sym::Struct, Sym::Forward)
                    | (Sym::Union, Sym::Forward)
            );
            if !ok {
                let at = self.defined_at.get(&key).copied().unwrap_or_default();
                let file = self
                    .sources
                    .files
                    .get(at.file)
                    .map_or("?", |f| f.name.as_str());
                return Err(self.err_at(
                    pos,
                    format!(
                        "`{key}` is already defined (at {file}:{}:{})",
                        at.line, at.col
                    ),
                ));
            }
            if matches!(sym, Sym::Forward) {
                return Ok(full);
            }
        }
        self.defined_at.insert(key.clone(), pos);
        self.spec.symbols.insert(key, sym);
        Ok(full)
    }

    /// Finds a (possibly relative) scoped name, innermost scope first.
    fn lookup(&self, name: &[String], absolute: bool) -> Option<(Scoped, Sym)> {
        let tries = if absolute {
            0..=0
        } else {
            0..=self.scope.len()
        };
        for k in tries.rev() {
            let mut full: Scoped = self.scope[..k].to_vec();
            full.extend(name.iter().cloned());
            if let Some(s) = self.spec.symbols.get(&join(&full)) {
                return Some((full, s.clone()));
            }
        }
        None
    }

    fn scoped_name(&mut self) -> Result<(Scoped, bool, Pos)> {
        let pos = self.pos();
        let absolute = self.eat_punct("::");
        let mut parts = vec![self.ident("a name")?.0];
        while self.is_punct("::") {
            self.i += 1;
            parts.push(self.ident("a name after `::`")?.0);
        }
        Ok((parts, absolute, pos))
    }

    fn annotations(&mut self) -> Result<Annotations> {
        let mut a = Annotations::default();
        while self.is_punct("@") {
            let at = self.pos();
            self.i += 1;
            let (name, pos) = match self.peek() {
                // `@default` is a keyword used as an annotation name.
                Some(TokKind::Ident(s)) if s == "default" || !KEYWORDS.contains(&s.as_str()) => {
                    let s = s.clone();
                    let pos = self.pos();
                    self.i += 1;
                    (s, pos)
                }
                _ => return Err(self.expected("an annotation name after `@`")),
            };
            let mut name = name;
            // `@::ns::name`-style scoped annotation names.
            while self.eat_punct("::") {
                name = self.ident("an annotation name")?.0;
            }
            match name.as_str() {
                "key" | "optional" => {
                    let on = if self.eat_punct("(") {
                        let v = self.const_expr()?;
                        self.expect_punct(")", "to close the annotation")?;
                        match v {
                            Value::Bool(b) => b,
                            _ => {
                                return Err(
                                    self.err_at(pos, format!("`@{name}` takes TRUE or FALSE"))
                                )
                            }
                        }
                    } else {
                        true
                    };
                    if name == "key" {
                        a.key = on;
                    } else {
                        a.optional = on;
                    }
                }
                "id" | "value" | "bit_bound" => {
                    self.expect_punct("(", &format!("after `@{name}`"))?;
                    let v = self.u32_expr(&format!("`@{name}`"))?;
                    self.expect_punct(")", "to close the annotation")?;
                    match name.as_str() {
                        "id" => a.id = Some(v),
                        "value" => a.value = Some(v),
                        _ => {
                            if !(1..=32).contains(&v) {
                                return Err(
                                    self.err_at(pos, "`@bit_bound` must be 1..=32 for an enum")
                                );
                            }
                            a.bit_bound = Some(v)
                        }
                    }
                }
                "default" => {
                    self.expect_punct("(", "after `@default`")?;
                    self.const_expr()?;
                    self.expect_punct(")", "to close the annotation")?;
                }
                "mutable" => {
                    return Err(self.err_at(
                        at,
                        "@mutable types are not supported yet (their XCDR encoding is not implemented): use @final or @appendable",
                    ));
                }
                "extensibility" => {
                    let toks = self.balanced_args()?;
                    if toks
                        .iter()
                        .any(|t| matches!(&t.kind, TokKind::Ident(s) if s == "MUTABLE"))
                    {
                        return Err(self.err_at(
                            at,
                            "@extensibility(MUTABLE) is not supported yet: use FINAL or APPENDABLE",
                        ));
                    }
                }
                _ => {
                    // Unknown annotations (and @topic, @final, @appendable, @nested ...):
                    // parse their arguments and ignore them.
                    self.balanced_args()?;
                }
            }
        }
        Ok(a)
    }

    /// Skips `( ... )` with balanced parentheses, if present.
    fn balanced_args(&mut self) -> Result<Vec<Tok>> {
        let mut out = Vec::new();
        if !self.is_punct("(") {
            return Ok(out);
        }
        let open = self.pos();
        let mut depth = 0usize;
        loop {
            match self.peek() {
                None => return Err(self.err_at(open, "unclosed `(` in annotation arguments")),
                Some(TokKind::Punct("(")) => depth += 1,
                Some(TokKind::Punct(")")) => {
                    depth -= 1;
                    if depth == 0 {
                        self.i += 1;
                        return Ok(out);
                    }
                }
                _ => {}
            }
            out.push(self.toks[self.i].clone());
            self.i += 1;
        }
    }

    fn definition(&mut self, items: &mut Vec<Item>) -> Result<()> {
        let ann_pos = self.pos();
        let ann = self.annotations()?;
        if ann.key || ann.optional || ann.id.is_some() {
            return Err(self.err_at(
                ann_pos,
                "`@key`, `@optional` and `@id` apply to members, not to definitions",
            ));
        }
        let pos = self.pos();
        let kw = match self.peek() {
            Some(TokKind::Ident(s)) => s.clone(),
            _ => {
                return Err(
                    self.expected("a definition (module, struct, union, enum, typedef or const)")
                )
            }
        };
        match kw.as_str() {
            "module" => self.module(items),
            "struct" => self.struct_def(items),
            "union" => self.union_def(items),
            "enum" => self.enum_def(items, ann.bit_bound),
            "typedef" => self.typedef(items),
            "const" => self.const_def(items),
            "interface" | "valuetype" | "exception" | "native" | "component" | "home"
            | "eventtype" | "abstract" | "local" | "custom" | "porttype" | "connector"
            | "bitset" | "bitmask" | "import" | "typeid" | "typeprefix" => Err(self.err_at(
                pos,
                format!("`{kw}` is outside the supported IDL subset (modules, structs, unions, enums, typedefs, consts)"),
            )),
            _ => Err(self.expected("a definition (module, struct, union, enum, typedef or const)")),
        }
    }

    fn module(&mut self, items: &mut Vec<Item>) -> Result<()> {
        self.i += 1;
        let (name, pos) = self.ident("a module name")?;
        self.declare(&name, pos, Sym::Module)?;
        self.expect_punct("{", "to open the module")?;
        self.enter()?;
        self.scope.push(name.clone());
        let mut body = Vec::new();
        while !self.is_punct("}") {
            if self.peek().is_none() {
                return Err(self.expected("`}` to close the module"));
            }
            self.definition(&mut body)?;
        }
        self.i += 1;
        self.scope.pop();
        self.leave();
        self.expect_punct(";", "after the module's `}`")?;
        items.push(Item::Module(name, body));
        Ok(())
    }

    fn struct_def(&mut self, items: &mut Vec<Item>) -> Result<()> {
        self.i += 1;
        let (name, pos) = self.ident("a struct name")?;
        if self.eat_punct(";") {
            self.declare(&name, pos, Sym::Forward)?;
            return Ok(());
        }
        let base = if self.eat_punct(":") {
            let (n, abs, bpos) = self.scoped_name()?;
            match self.resolve_named(&n, abs, bpos)? {
                (full, Sym::Struct) => Some(full),
                (full, _) => {
                    return Err(self.err_at(
                        bpos,
                        format!(
                            "the base of a struct must be a struct; `{}` is not",
                            join(&full)
                        ),
                    ))
                }
            }
        } else {
            None
        };
        self.expect_punct("{", "to open the struct")?;
        // Declared before the members so they can refer to it through a sequence.
        let full = self.scoped(&name);
        if !self.spec.symbols.contains_key(&join(&full)) {
            self.declare(&name, pos, Sym::Forward)?;
        } else if self.spec.symbols.get(&join(&full)) != Some(&Sym::Forward) {
            self.declare(&name, pos, Sym::Struct)?;
        }
        let mut taken: Vec<String> = Vec::new();
        if let Some(b) = &base {
            taken = self.all_members(b).into_iter().map(|m| m.name).collect();
        }
        let mut members = Vec::new();
        while !self.is_punct("}") {
            if self.peek().is_none() {
                return Err(self.expected("`}` to close the struct"));
            }
            self.member(&mut members, &mut taken)?;
        }
        self.i += 1;
        self.expect_punct(";", "after the struct's `}`")?;
        let full = self.declare(&name, pos, Sym::Struct)?;
        let s = Struct {
            name: full.clone(),
            base,
            members,
        };
        self.spec.structs.insert(join(&full), s.clone());
        items.push(Item::Struct(s));
        Ok(())
    }

    /// Every member of a struct, base members first.
    pub fn all_members(&self, name: &[String]) -> Vec<Member> {
        all_members(&self.spec, name)
    }

    fn member(&mut self, members: &mut Vec<Member>, taken: &mut Vec<String>) -> Result<()> {
        let ann = self.annotations()?;
        let ty = self.type_spec(false)?;
        loop {
            let (name, pos, ty) = self.declarator(ty.clone())?;
            if taken.contains(&name) {
                return Err(self.err_at(
                    pos,
                    format!("member `{name}` is declared twice (or also in a base struct)"),
                ));
            }
            if ann.key && ann.optional {
                return Err(self.err_at(pos, "a member cannot be both @key and @optional"));
            }
            taken.push(name.clone());
            members.push(Member {
                name,
                ty,
                key: ann.key,
                optional: ann.optional,
                id: ann.id,
                pos,
            });
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct(";", "after the member declaration")
    }

    fn declarator(&mut self, ty: Type) -> Result<(String, Pos, Type)> {
        let (name, pos) = self.ident("a member name")?;
        let mut dims = Vec::new();
        while self.eat_punct("[") {
            dims.push(self.bound("an array dimension")?);
            self.expect_punct("]", "to close the array dimension")?;
        }
        let ty = if dims.is_empty() {
            ty
        } else {
            Type::Array(Box::new(ty), dims)
        };
        Ok((name, pos, ty))
    }

    fn resolve_named(&self, n: &[String], abs: bool, pos: Pos) -> Result<(Scoped, Sym)> {
        self.lookup(n, abs)
            .ok_or_else(|| self.err_at(pos, format!("unknown name `{}`", join(n))))
    }

    /// A type; `in_sequence` allows forward-declared types.
    fn type_spec(&mut self, in_sequence: bool) -> Result<Type> {
        self.enter()?;
        let r = self.type_spec_inner(in_sequence);
        self.leave();
        r
    }

    fn type_spec_inner(&mut self, in_sequence: bool) -> Result<Type> {
        let pos = self.pos();
        let kw = match self.peek() {
            Some(TokKind::Ident(s)) => s.clone(),
            Some(TokKind::Punct("::")) => String::new(),
            _ => return Err(self.expected("a type")),
        };
        let simple = match kw.as_str() {
            "boolean" => Some(Type::Bool),
            "octet" => Some(Type::Octet),
            "char" => Some(Type::Char),
            "wchar" => Some(Type::WChar),
            "float" => Some(Type::F32),
            "double" => Some(Type::F64),
            "int8" => Some(Type::I8),
            "uint8" => Some(Type::U8),
            "int16" => Some(Type::I16),
            "uint16" => Some(Type::U16),
            "int32" => Some(Type::I32),
            "uint32" => Some(Type::U32),
            "int64" => Some(Type::I64),
            "uint64" => Some(Type::U64),
            "short" => Some(Type::I16),
            _ => None,
        };
        if let Some(t) = simple {
            self.i += 1;
            return Ok(t);
        }
        match kw.as_str() {
            "long" => {
                self.i += 1;
                if self.eat_kw("long") {
                    Ok(Type::I64)
                } else if self.is_kw("double") {
                    Err(self.err_at(pos, "`long double` is not supported: use double"))
                } else {
                    Ok(Type::I32)
                }
            }
            "unsigned" => {
                self.i += 1;
                if self.eat_kw("short") {
                    Ok(Type::U16)
                } else if self.eat_kw("long") {
                    Ok(if self.eat_kw("long") {
                        Type::U64
                    } else {
                        Type::U32
                    })
                } else {
                    Err(self.expected("`short`, `long` or `long long` after `unsigned`"))
                }
            }
            "string" => {
                self.i += 1;
                if self.eat_punct("<") {
                    let n = self.angle_bound("a string bound")?;
                    self.expect_close_angle()?;
                    Ok(Type::String(Some(n)))
                } else {
                    Ok(Type::String(None))
                }
            }
            "wstring" => {
                self.i += 1;
                if self.eat_punct("<") {
                    let n = self.angle_bound("a wstring bound")?;
                    self.expect_close_angle()?;
                    Ok(Type::WString(Some(n)))
                } else {
                    Ok(Type::WString(None))
                }
            }
            "fixed" => Err(self.err_at(
                pos,
                "fixed-point types are not supported: use double or a scaled integer",
            )),
            "any" | "Object" | "ValueBase" | "void" => {
                Err(self.err_at(pos, format!("`{kw}` is outside the supported IDL subset")))
            }
            "map" => Err(self.err_at(
                pos,
                "map types are not supported yet: use a sequence of a key/value struct",
            )),
            "sequence" => {
                self.i += 1;
                self.expect_punct("<", "after `sequence`")?;
                let elem = self.type_spec(true)?;
                let bound = if self.eat_punct(",") {
                    Some(self.angle_bound("a sequence bound")?)
                } else {
                    None
                };
                self.expect_close_angle()?;
                Ok(Type::Sequence(Box::new(elem), bound))
            }
            _ => {
                let (n, abs, npos) = self.scoped_name()?;
                let (full, sym) = self.resolve_named(&n, abs, npos)?;
                let key = join(&full);
                match sym {
                    Sym::Struct | Sym::Union | Sym::Enum | Sym::Typedef(_) => Ok(Type::Named(full)),
                    Sym::Forward if in_sequence => {
                        self.forward_uses.push((key, npos));
                        Ok(Type::Named(full))
                    }
                    Sym::Forward => Err(self.err_at(
                        npos,
                        format!("`{key}` is not defined yet (only forward-declared): only a sequence may hold it"),
                    )),
                    _ => Err(self.err_at(npos, format!("`{key}` is not a type"))),
                }
            }
        }
    }

    /// A positive integer constant (bounds, dimensions).
    fn bound(&mut self, what: &str) -> Result<u64> {
        let pos = self.pos();
        match self.const_expr()? {
            Value::Int(v) if v > 0 && v <= i128::from(BOUND_MAX) => Ok(v as u64),
            Value::Int(v) => {
                Err(self.err_at(pos, format!("{what} must be 1..={BOUND_MAX}, not {v}")))
            }
            _ => Err(self.err_at(pos, format!("{what} must be a positive integer"))),
        }
    }

    /// A bound inside `<...>`.
    fn angle_bound(&mut self, what: &str) -> Result<u64> {
        let outer = std::mem::replace(&mut self.in_angle, true);
        let r = self.bound(what);
        self.in_angle = outer;
        r
    }

    fn u32_expr(&mut self, what: &str) -> Result<u32> {
        let pos = self.pos();
        match self.const_expr()? {
            Value::Int(v) if (0..=i128::from(u32::MAX)).contains(&v) => Ok(v as u32),
            _ => Err(self.err_at(pos, format!("{what} needs an integer in 0..=4294967295"))),
        }
    }

    fn enum_def(&mut self, items: &mut Vec<Item>, bit_bound: Option<u32>) -> Result<()> {
        self.i += 1;
        let (name, pos) = self.ident("an enum name")?;
        let full = self.declare(&name, pos, Sym::Enum)?;
        self.expect_punct("{", "to open the enum")?;
        let mut enumerators: Vec<(String, u32)> = Vec::new();
        let mut positions = Vec::new();
        let mut next = 0u64;
        loop {
            let ann = self.annotations()?;
            let (e, epos) = self.ident("an enumerator name")?;
            let v = match ann.value {
                Some(v) => u64::from(v),
                None => next,
            };
            let v = u32::try_from(v)
                .map_err(|_| self.err_at(epos, "enumerator value exceeds 4294967295"))?;
            if let Some(b) = bit_bound {
                if b < 32 && u64::from(v) >= 1u64 << b {
                    return Err(
                        self.err_at(epos, format!("value {v} does not fit @bit_bound({b})"))
                    );
                }
            }
            if let Some((other, _)) = enumerators.iter().find(|(_, x)| *x == v) {
                return Err(self.err_at(
                    epos,
                    format!("enumerator `{e}` has value {v}, like `{other}`"),
                ));
            }
            next = u64::from(v) + 1;
            self.declare(&e, epos, Sym::Enumerator(full.clone(), v))?;
            let mut inner = full.clone();
            inner.push(e.clone());
            self.spec
                .symbols
                .insert(join(&inner), Sym::Enumerator(full.clone(), v));
            enumerators.push((e, v));
            positions.push(epos);
            if self.eat_punct(",") {
                if self.is_punct("}") {
                    break;
                }
                continue;
            }
            break;
        }
        self.expect_punct("}", "to close the enum (or `,` before the next enumerator)")?;
        self.expect_punct(";", "after the enum's `}`")?;
        let e = Enum {
            name: full.clone(),
            enumerators,
            positions,
        };
        self.spec.enums.insert(join(&full), e.clone());
        items.push(Item::Enum(e));
        Ok(())
    }

    /// Expands typedefs.
    fn expand(&self, ty: &Type) -> Type {
        expand(&self.spec, ty)
    }

    fn union_def(&mut self, items: &mut Vec<Item>) -> Result<()> {
        self.i += 1;
        let (name, pos) = self.ident("a union name")?;
        if self.eat_punct(";") {
            self.declare(&name, pos, Sym::Forward)?;
            return Ok(());
        }
        if !self.eat_kw("switch") {
            return Err(self.expected("`switch` after the union name"));
        }
        self.expect_punct("(", "after `switch`")?;
        self.annotations()?;
        let dpos = self.pos();
        let disc_t = self.type_spec(false)?;
        let disc = self.expand(&disc_t);
        let ok = match &disc {
            Type::Bool
            | Type::Char
            | Type::Octet
            | Type::I8
            | Type::U8
            | Type::I16
            | Type::U16
            | Type::I32
            | Type::U32
            | Type::I64
            | Type::U64 => true,
            Type::Named(n) => self.spec.enums.contains_key(&join(n)),
            _ => false,
        };
        if !ok {
            return Err(self.err_at(
                dpos,
                "a union discriminator must be an integer, char, boolean, octet or enum type",
            ));
        }
        self.expect_punct(")", "after the discriminator type")?;
        self.expect_punct("{", "to open the union")?;
        let full = self.scoped(&name);
        let mut branches: Vec<Branch> = Vec::new();
        let mut taken: Vec<String> = Vec::new();
        let mut seen: Vec<Value> = Vec::new();
        let mut has_default = false;
        while !self.is_punct("}") {
            let mut labels = Vec::new();
            let mut default = false;
            loop {
                let lpos = self.pos();
                if self.eat_kw("case") {
                    let v = self.const_expr()?;
                    let v = self.coerce(v, &disc, lpos, "case label")?;
                    if seen.contains(&v) {
                        return Err(self.err_at(lpos, "this case label is used twice"));
                    }
                    seen.push(v.clone());
                    labels.push(v);
                } else if self.eat_kw("default") {
                    if has_default {
                        return Err(self.err_at(lpos, "a union has at most one `default` label"));
                    }
                    has_default = true;
                    default = true;
                } else if labels.is_empty() && !default {
                    return Err(self.expected("`case` or `default` in the union"));
                } else {
                    break;
                }
                self.expect_punct(":", "after the case label")?;
            }
            let ann = self.annotations()?;
            let ty = self.type_spec(false)?;
            let (mname, mpos, ty) = self.declarator(ty)?;
            if taken.contains(&mname) {
                return Err(self.err_at(mpos, format!("union member `{mname}` is declared twice")));
            }
            if ann.key || ann.optional {
                return Err(self.err_at(mpos, "union members cannot be @key or @optional"));
            }
            taken.push(mname.clone());
            self.expect_punct(";", "after the union member")?;
            branches.push(Branch {
                labels,
                default,
                member: Member {
                    name: mname,
                    ty,
                    key: false,
                    optional: false,
                    id: ann.id,
                    pos: mpos,
                },
            });
            if self.peek().is_none() {
                return Err(self.expected("`}` to close the union"));
            }
        }
        self.i += 1;
        self.expect_punct(";", "after the union's `}`")?;
        if branches.is_empty() {
            return Err(self.err_at(pos, "a union needs at least one case"));
        }
        if has_default && covers_all(&self.spec, &disc, &seen) {
            return Err(self.err_at(pos, "the `default` branch can never be selected: the case labels cover every discriminator value"));
        }
        self.declare(&name, pos, Sym::Union)?;
        let u = Union {
            name: full.clone(),
            disc,
            branches,
        };
        self.spec.unions.insert(join(&full), u.clone());
        items.push(Item::Union(u));
        Ok(())
    }

    fn typedef(&mut self, items: &mut Vec<Item>) -> Result<()> {
        self.i += 1;
        self.annotations()?;
        let ty = self.type_spec(false)?;
        loop {
            let (name, pos, ty) = self.declarator(ty.clone())?;
            let full = self.declare(&name, pos, Sym::Typedef(ty.clone()))?;
            items.push(Item::Typedef(Typedef { name: full, ty }));
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct(";", "after the typedef")
    }

    fn const_def(&mut self, items: &mut Vec<Item>) -> Result<()> {
        self.i += 1;
        let tpos = self.pos();
        let ty = self.type_spec(false)?;
        let ty = self.expand(&ty);
        match &ty {
            Type::Sequence(..) | Type::Array(..) | Type::WChar | Type::WString(_) => {
                return Err(self.err_at(tpos, "a constant must have an integer, floating-point, char, boolean, string or enum type"))
            }
            Type::Named(n) if !self.spec.enums.contains_key(&join(n)) => {
                return Err(self.err_at(tpos, "a constant must have an integer, floating-point, char, boolean, string or enum type"))
            }
            _ => {}
        }
        let (name, pos) = self.ident("a constant name")?;
        self.expect_punct("=", "after the constant name")?;
        let vpos = self.pos();
        let v = self.const_expr()?;
        let v = self.coerce(v, &ty, vpos, "constant")?;
        self.expect_punct(";", "after the constant's value")?;
        let full = self.declare(&name, pos, Sym::Const(ty.clone(), v.clone()))?;
        items.push(Item::Const(Const {
            name: full,
            ty,
            value: v,
        }));
        Ok(())
    }

    /// Converts `v` to type `ty`, checking its range.
    fn coerce(&self, v: Value, ty: &Type, pos: Pos, what: &str) -> Result<Value> {
        let range = |lo: i128, hi: i128, tname: &str| -> Result<Value> {
            match v {
                Value::Int(x) if x >= lo && x <= hi => Ok(Value::Int(x)),
                Value::Int(x) => Err(self.err_at(
                    pos,
                    format!("{what} value {x} does not fit in {tname} ({lo}..={hi})"),
                )),
                _ => Err(self.err_at(pos, format!("{what} must be an integer ({tname})"))),
            }
        };
        match ty {
            Type::I8 => range(i128::from(i8::MIN), i128::from(i8::MAX), "int8"),
            Type::U8 | Type::Octet => range(0, i128::from(u8::MAX), "octet"),
            Type::I16 => range(i128::from(i16::MIN), i128::from(i16::MAX), "short"),
            Type::U16 => range(0, i128::from(u16::MAX), "unsigned short"),
            Type::I32 => range(i128::from(i32::MIN), i128::from(i32::MAX), "long"),
            Type::U32 => range(0, i128::from(u32::MAX), "unsigned long"),
            Type::I64 => range(i128::from(i64::MIN), i128::from(i64::MAX), "long long"),
            Type::U64 => range(0, i128::from(u64::MAX), "unsigned long long"),
            Type::F32 | Type::F64 => {
                let f = match v {
                    Value::Float(f) => f,
                    Value::Int(x) => x as f64,
                    _ => return Err(self.err_at(pos, format!("{what} must be a number"))),
                };
                if matches!(ty, Type::F32) && f.abs() > f64::from(f32::MAX) {
                    return Err(self.err_at(pos, format!("{what} value {f} does not fit in float")));
                }
                Ok(Value::Float(f))
            }
            Type::Char => match v {
                Value::Char(c) if c.is_ascii() => Ok(Value::Char(c)),
                Value::Char(c) => {
                    Err(self.err_at(pos, format!("char {c:?} is not one byte (ASCII)")))
                }
                _ => Err(self.err_at(pos, format!("{what} must be a character literal"))),
            },
            Type::Bool => match v {
                Value::Bool(b) => Ok(Value::Bool(b)),
                _ => Err(self.err_at(pos, format!("{what} must be TRUE or FALSE"))),
            },
            Type::String(bound) => match v {
                Value::Str(s) => {
                    if let Some(b) = bound {
                        if s.len() as u64 > *b {
                            return Err(self.err_at(
                                pos,
                                format!("string of {} bytes exceeds its bound {b}", s.len()),
                            ));
                        }
                    }
                    Ok(Value::Str(s))
                }
                _ => Err(self.err_at(pos, format!("{what} must be a string literal"))),
            },
            Type::Named(n) => match v {
                Value::Enumerator(e, name, x) if e == *n => Ok(Value::Enumerator(e, name, x)),
                _ => Err(self.err_at(
                    pos,
                    format!("{what} must be an enumerator of `{}`", join(n)),
                )),
            },
            _ => Err(self.err_at(pos, format!("{what} has an unsupported type"))),
        }
    }

    // ---- constant expressions -----------------------------------------------------------

    pub fn const_expr(&mut self) -> Result<Value> {
        self.enter()?;
        let r = self.binary(0);
        self.leave();
        r
    }

    fn binary(&mut self, level: usize) -> Result<Value> {
        const LEVELS: [&[&str]; 6] = [
            &["|"],
            &["^"],
            &["&"],
            &["<<", ">>"],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut v = self.binary(level + 1)?;
        loop {
            let op = match self.peek() {
                Some(TokKind::Punct(">>")) if self.in_angle => return Ok(v),
                Some(TokKind::Punct(p)) if LEVELS[level].contains(p) => *p,
                _ => return Ok(v),
            };
            let pos = self.pos();
            self.i += 1;
            let r = self.binary(level + 1)?;
            v = self.apply(op, v, r, pos)?;
        }
    }

    fn apply(&self, op: &str, l: Value, r: Value, pos: Pos) -> Result<Value> {
        let overflow = || self.err_at(pos, format!("`{op}` overflows"));
        match (l, r) {
            (Value::Int(a), Value::Int(b)) => {
                let v = match op {
                    "+" => a.checked_add(b),
                    "-" => a.checked_sub(b),
                    "*" => a.checked_mul(b),
                    "/" | "%" if b == 0 => {
                        return Err(self.err_at(pos, "division by zero in a constant expression"))
                    }
                    "/" => a.checked_div(b),
                    "%" => a.checked_rem(b),
                    "<<" | ">>" if !(0..64).contains(&b) => {
                        return Err(self.err_at(pos, format!("shift by {b}: must be 0..64")))
                    }
                    "<<" => a
                        .checked_shl(b as u32)
                        .filter(|v| v.unsigned_abs() <= u128::from(u64::MAX)),
                    ">>" => a.checked_shr(b as u32),
                    "&" => Some(a & b),
                    "|" => Some(a | b),
                    "^" => Some(a ^ b),
                    _ => None,
                };
                v.map(Value::Int).ok_or_else(overflow)
            }
            (l @ (Value::Int(_) | Value::Float(_)), r @ (Value::Int(_) | Value::Float(_))) => {
                let (a, b) = (as_f64(&l), as_f64(&r));
                let v = match op {
                    "+" => a + b,
                    "-" => a - b,
                    "*" => a * b,
                    "/" => a / b,
                    _ => return Err(self.err_at(pos, format!("`{op}` needs integers"))),
                };
                if v.is_finite() {
                    Ok(Value::Float(v))
                } else {
                    Err(overflow())
                }
            }
            _ => Err(self.err_at(pos, format!("`{op}` needs numbers"))),
        }
    }

    fn unary(&mut self) -> Result<Value> {
        let pos = self.pos();
        for op in ["-", "+", "~"] {
            if self.eat_punct(op) {
                self.enter()?;
                let v = self.unary();
                self.leave();
                let v = v?;
                return match (op, v) {
                    ("-", Value::Int(x)) => x
                        .checked_neg()
                        .map(Value::Int)
                        .ok_or_else(|| self.err_at(pos, "`-` overflows")),
                    ("-", Value::Float(x)) => Ok(Value::Float(-x)),
                    ("+", v @ (Value::Int(_) | Value::Float(_))) => Ok(v),
                    ("~", Value::Int(x)) => Ok(Value::Int(!x)),
                    _ => Err(self.err_at(pos, format!("unary `{op}` needs a number"))),
                };
            }
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Value> {
        let pos = self.pos();
        match self.peek().cloned() {
            Some(TokKind::Int(v)) => {
                self.i += 1;
                i128::try_from(v)
                    .map(Value::Int)
                    .map_err(|_| self.err_at(pos, "integer literal too large"))
            }
            Some(TokKind::Float(f)) => {
                self.i += 1;
                if !f.is_finite() {
                    return Err(self.err_at(pos, "floating-point literal out of range"));
                }
                Ok(Value::Float(f))
            }
            Some(TokKind::Fixed) => Err(self.err_at(
                pos,
                "fixed-point literals are not supported: use a floating-point literal",
            )),
            Some(TokKind::Str(s)) => {
                self.i += 1;
                let mut s = s;
                // Adjacent string literals concatenate.
                while let Some(TokKind::Str(t)) = self.peek() {
                    s.push_str(t);
                    self.i += 1;
                }
                Ok(Value::Str(s))
            }
            Some(TokKind::Char(c)) => {
                self.i += 1;
                Ok(Value::Char(c))
            }
            Some(TokKind::Ident(k)) if k == "TRUE" || k == "FALSE" => {
                self.i += 1;
                Ok(Value::Bool(k == "TRUE"))
            }
            Some(TokKind::Punct("(")) => {
                self.i += 1;
                let outer = std::mem::replace(&mut self.in_angle, false);
                let v = self.const_expr();
                self.in_angle = outer;
                let v = v?;
                self.expect_punct(")", "to close the parenthesis")?;
                Ok(v)
            }
            Some(TokKind::Ident(_)) | Some(TokKind::Punct("::")) => {
                let (n, abs, npos) = self.scoped_name()?;
                match self.resolve_named(&n, abs, npos)? {
                    (_, Sym::Const(_, v)) => Ok(v),
                    (e, Sym::Enumerator(en, v)) => Ok(Value::Enumerator(
                        en,
                        e.last().cloned().unwrap_or_default(),
                        v,
                    )),
                    (full, _) => Err(self.err_at(
                        npos,
                        format!("`{}` is not a constant or an enumerator", join(&full)),
                    )),
                }
            }
            _ => Err(self.expected("a constant expression")),
        }
    }
}

fn as_f64(v: &Value) -> f64 {
    match v {
        Value::Int(x) => *x as f64,
        Value::Float(f) => *f,
        _ => 0.0,
    }
}

/// Every member of struct `name`, base members first.
pub fn all_members(spec: &Spec, name: &[String]) -> Vec<Member> {
    let mut out = Vec::new();
    let mut chain = Vec::new();
    let mut cur = spec.structs.get(&join(name));
    // The base chain is finite: a base is defined before its derived struct.
    while let Some(s) = cur {
        chain.push(s);
        if chain.len() > NESTING_MAX {
            break;
        }
        cur = s.base.as_ref().and_then(|b| spec.structs.get(&join(b)));
    }
    for s in chain.iter().rev() {
        out.extend(s.members.iter().cloned());
    }
    out
}

/// Expands typedef names (arrays of typedef arrays merge their dimensions).
pub fn expand(spec: &Spec, ty: &Type) -> Type {
    expand_depth(spec, ty, 0)
}

fn expand_depth(spec: &Spec, ty: &Type, depth: usize) -> Type {
    if depth > NESTING_MAX {
        return ty.clone();
    }
    match ty {
        Type::Named(n) => match spec.symbols.get(&join(n)) {
            Some(Sym::Typedef(t)) => expand_depth(spec, t, depth + 1),
            _ => ty.clone(),
        },
        Type::Array(inner, dims) => match expand_depth(spec, inner, depth + 1) {
            Type::Array(i2, d2) => {
                let mut d = dims.clone();
                d.extend(d2);
                Type::Array(i2, d)
            }
            other => Type::Array(Box::new(other), dims.clone()),
        },
        Type::Sequence(inner, b) => {
            Type::Sequence(Box::new(expand_depth(spec, inner, depth + 1)), *b)
        }
        _ => ty.clone(),
    }
}

/// True when `labels` name every value of the discriminator type.
pub fn covers_all(spec: &Spec, disc: &Type, labels: &[Value]) -> bool {
    match disc {
        Type::Bool => labels.contains(&Value::Bool(true)) && labels.contains(&Value::Bool(false)),
        Type::Named(n) => spec.enums.get(&join(n)).is_some_and(|e| {
            e.enumerators.iter().all(|(_, v)| {
                labels
                    .iter()
                    .any(|l| matches!(l, Value::Enumerator(_, _, x) if x == v))
            })
        }),
        Type::Octet | Type::U8 => labels.len() >= 256,
        Type::I8 => labels.len() >= 256,
        _ => false,
    }
}
