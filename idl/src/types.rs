//! The resolved type model of an IDL file, for tools that handle types at run time
//! (`spindle-dynamic`: CDR and JSON driven by a type known only when the program runs).
//!
//! The front end is the compiler's own (preprocessor, parser, name resolution, constant
//! evaluation), so a file that `spindle-idlc` accepts describes the same types here.
//! Typedefs are expanded; struct members include the base struct's members first; every
//! struct, union and enum gets a [`TypeId`] into one [`TypeLibrary`], so recursive types
//! (`struct Node { sequence<Node> children; }`) are plain indices.
//! [`TypeLibrary::type_hash`] is a type's structural hash: what tells two definitions of
//! one type name apart.
//!
//! ```
//! use spindle_idl::types::{TypeDef, TypeLibrary, TypeRef};
//! let lib = TypeLibrary::from_source(
//!     "x.idl",
//!     "module M { typedef string<8> Name; struct S { @key long id; Name name; }; };",
//!     &[] as &[&str],
//! )
//! .unwrap();
//! let id = lib.lookup("M::S").unwrap();
//! let TypeDef::Struct(s) = lib.get(id) else { panic!() };
//! assert_eq!(s.members[1].ty, TypeRef::String(Some(8)));
//! assert!(s.members[0].key);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::ast::{self, Type, Value};
use crate::error::Result;
use crate::lexer;
use crate::parser::{self, join, Spec};

mod hash;
pub use hash::{TYPE_HASH_DEPTH_MAX, TYPE_HASH_STEPS_MAX};

/// Largest element count a bounded sequence or array of non-primitive elements may have
/// and still count as bounded when sizing (the generated code's `const fn` loop limit).
pub const SIZE_LOOP_MAX: u64 = crate::codegen::SIZE_LOOP_MAX;

/// Deepest nesting the parser accepts (modules, types, key paths).
pub const NESTING_MAX: usize = parser::NESTING_MAX;

/// Index of a struct, union or enum in its [`TypeLibrary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeId(pub usize);

/// A member's type, typedefs expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeRef {
    /// `boolean`.
    Bool,
    /// `octet`.
    Octet,
    /// `char` (one byte).
    Char,
    /// `wchar` (two bytes).
    WChar,
    /// `int8`.
    I8,
    /// `uint8`.
    U8,
    /// `short` / `int16`.
    I16,
    /// `unsigned short` / `uint16`.
    U16,
    /// `long` / `int32`.
    I32,
    /// `unsigned long` / `uint32`.
    U32,
    /// `long long` / `int64`.
    I64,
    /// `unsigned long long` / `uint64`.
    U64,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// `string` / `string<N>`: the bound in bytes.
    String(Option<u64>),
    /// `wstring` / `wstring<N>`: the bound in UTF-16 code units.
    WString(Option<u64>),
    /// `sequence<T>` / `sequence<T, N>`: the bound in elements.
    Sequence(Box<TypeRef>, Option<u64>),
    /// `T m[N][M]`: dimensions outermost first.
    Array(Box<TypeRef>, Vec<u64>),
    /// A struct, union or enum of the library.
    Named(TypeId),
}

/// A struct member or union branch member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDef {
    /// The IDL name.
    pub name: String,
    /// Its type.
    pub ty: TypeRef,
    /// `@key`.
    pub key: bool,
    /// `@optional`.
    pub optional: bool,
    /// The member id an `@optional` member's parameter header carries: `@id`, else the
    /// member's position among all members (base members first).
    pub id: u32,
}

/// A struct, base members first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructDef {
    /// Scoped IDL name (`Avionics::AirData`).
    pub name: String,
    /// Every member, base members first.
    pub members: Vec<MemberDef>,
}

/// One branch of a union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchDef {
    /// The label values as integers: integers as they are, `char` as its code, `boolean`
    /// as 0/1, enumerators as their value.
    pub labels: Vec<i128>,
    /// The `default:` branch.
    pub default: bool,
    /// The member it selects.
    pub member: MemberDef,
}

/// A union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnionDef {
    /// Scoped IDL name.
    pub name: String,
    /// The discriminator type (an integer, `char`, `wchar`, `boolean`, `octet` or an enum).
    pub disc: TypeRef,
    /// The branches, in declaration order.
    pub branches: Vec<BranchDef>,
    /// True when some discriminator values select no member (no default branch and the
    /// labels do not name every value of the discriminator type).
    pub unselected: bool,
}

/// An enum (32-bit on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumDef {
    /// Scoped IDL name.
    pub name: String,
    /// Enumerators and their values, in declaration order.
    pub enumerators: Vec<(String, u32)>,
}

/// A constructed type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeDef {
    /// A struct.
    Struct(StructDef),
    /// A union.
    Union(UnionDef),
    /// An enum.
    Enum(EnumDef),
}

impl TypeDef {
    /// The scoped IDL name.
    pub fn name(&self) -> &str {
        match self {
            TypeDef::Struct(s) => &s.name,
            TypeDef::Union(u) => &u.name,
            TypeDef::Enum(e) => &e.name,
        }
    }
}

/// Every struct, union and enum of an IDL file (and of what it includes).
#[derive(Debug, Clone, Default)]
pub struct TypeLibrary {
    defs: Vec<TypeDef>,
    /// Scoped names (structs, unions, enums and typedefs naming one of them) → id.
    by_name: BTreeMap<String, TypeId>,
}

impl TypeLibrary {
    /// Reads and resolves an IDL file, searching `include_dirs` for `#include`s.
    pub fn from_file<Q: AsRef<Path>>(file: &Path, include_dirs: &[Q]) -> Result<Self> {
        let text = lexer::read_source(file)?;
        let mut sources = lexer::Sources::default();
        let path = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
        let idx = sources.add(file.display().to_string(), path, text);
        Self::resolve(&mut sources, idx, include_dirs)
    }

    /// Resolves IDL source text; `name` is used in diagnostics.
    pub fn from_source<Q: AsRef<Path>>(
        name: &str,
        source: &str,
        include_dirs: &[Q],
    ) -> Result<Self> {
        let mut sources = lexer::Sources::default();
        let idx = sources.add(name.to_string(), PathBuf::from(name), source.to_string());
        Self::resolve(&mut sources, idx, include_dirs)
    }

    fn resolve<Q: AsRef<Path>>(
        sources: &mut lexer::Sources,
        idx: usize,
        include_dirs: &[Q],
    ) -> Result<Self> {
        let dirs: Vec<PathBuf> = include_dirs
            .iter()
            .map(|d| d.as_ref().to_path_buf())
            .collect();
        let toks = lexer::Preprocessor::new(sources, &dirs).run(idx)?;
        let spec = parser::parse(&toks, sources)?;
        Self::from_spec(&spec).map_err(|name| {
            let pos = lexer::Pos {
                file: idx,
                line: 1,
                col: 1,
            };
            sources.error(pos, format!("type `{name}` is named but never defined"))
        })
    }

    /// Builds the library; `Err(name)` for a name that resolves to no type (the parser
    /// refuses those first, so this is a second line of defence).
    pub(crate) fn from_spec(spec: &Spec) -> std::result::Result<Self, String> {
        // Ids first (sorted names: the same file gives the same ids), then definitions.
        let mut names: Vec<&String> = spec
            .structs
            .keys()
            .chain(spec.unions.keys())
            .chain(spec.enums.keys())
            .collect();
        names.sort();
        names.dedup();
        let ids: HashMap<String, TypeId> = names
            .iter()
            .enumerate()
            .map(|(i, n)| ((*n).clone(), TypeId(i)))
            .collect();
        let conv = |t: &Type| convert(spec, &ids, t);
        let conv = &conv;
        let mut defs = Vec::with_capacity(names.len());
        for n in &names {
            let def = if let Some(e) = spec.enums.get(*n) {
                TypeDef::Enum(EnumDef {
                    name: join(&e.name),
                    enumerators: e.enumerators.clone(),
                })
            } else if let Some(s) = spec.structs.get(*n) {
                let members = parser::all_members(spec, &s.name)
                    .iter()
                    .enumerate()
                    .map(|(i, m)| member(m, i, conv))
                    .collect::<std::result::Result<_, _>>()?;
                TypeDef::Struct(StructDef {
                    name: join(&s.name),
                    members,
                })
            } else if let Some(u) = spec.unions.get(*n) {
                let all_labels: Vec<Value> = u
                    .branches
                    .iter()
                    .flat_map(|b| b.labels.iter().cloned())
                    .collect();
                let has_default = u.branches.iter().any(|b| b.default);
                let mut branches = Vec::with_capacity(u.branches.len());
                for b in &u.branches {
                    branches.push(BranchDef {
                        labels: b.labels.iter().map(label).collect(),
                        default: b.default,
                        member: member(&b.member, 0, conv)?,
                    });
                }
                TypeDef::Union(UnionDef {
                    name: join(&u.name),
                    disc: conv(&u.disc)?,
                    branches,
                    unselected: !has_default && !parser::covers_all(spec, &u.disc, &all_labels),
                })
            } else {
                continue;
            };
            defs.push(def);
        }
        let mut by_name: BTreeMap<String, TypeId> =
            ids.iter().map(|(k, v)| (k.clone(), *v)).collect();
        // Typedefs that name a constructed type are names of it too.
        for (name, sym) in &spec.symbols {
            if let parser::Sym::Typedef(t) = sym {
                if let Ok(TypeRef::Named(id)) = conv(t) {
                    by_name.entry(name.clone()).or_insert(id);
                }
            }
        }
        Ok(TypeLibrary { defs, by_name })
    }

    /// The type with scoped name `name` (`Avionics::AirData`; a leading `::` is allowed),
    /// or a typedef of one.
    pub fn lookup(&self, name: &str) -> Option<TypeId> {
        let name = name.trim().trim_start_matches("::");
        self.by_name.get(name).copied()
    }

    /// The definition of `id`. Ids come from this library ([`TypeLibrary::lookup`] or a
    /// [`TypeRef::Named`] inside it).
    pub fn get(&self, id: TypeId) -> &TypeDef {
        &self.defs[id.0]
    }

    /// Every struct, union and enum, sorted by scoped name.
    pub fn defs(&self) -> &[TypeDef] {
        &self.defs
    }

    /// The scoped names of every struct (the types a topic can have), sorted.
    pub fn struct_names(&self) -> Vec<&str> {
        self.defs
            .iter()
            .filter_map(|d| match d {
                TypeDef::Struct(s) => Some(s.name.as_str()),
                _ => None,
            })
            .collect()
    }
}

type Conv<'a> = dyn Fn(&Type) -> std::result::Result<TypeRef, String> + 'a;

fn member(
    m: &ast::Member,
    position: usize,
    conv: &Conv<'_>,
) -> std::result::Result<MemberDef, String> {
    Ok(MemberDef {
        name: m.name.clone(),
        ty: conv(&m.ty)?,
        key: m.key,
        optional: m.optional,
        id: m.id.unwrap_or(position as u32),
    })
}

fn label(v: &Value) -> i128 {
    match v {
        Value::Int(x) => *x,
        Value::Char(c) => i128::from(u32::from(*c)),
        Value::Bool(b) => i128::from(*b),
        Value::Enumerator(_, _, x) => i128::from(*x),
        // Labels are coerced to the (integral) discriminator type by the parser.
        Value::Float(_) | Value::Str(_) => 0,
    }
}

fn convert(
    spec: &Spec,
    ids: &HashMap<String, TypeId>,
    t: &Type,
) -> std::result::Result<TypeRef, String> {
    Ok(match parser::expand(spec, t) {
        Type::Bool => TypeRef::Bool,
        Type::Octet => TypeRef::Octet,
        Type::Char => TypeRef::Char,
        Type::WChar => TypeRef::WChar,
        Type::I8 => TypeRef::I8,
        Type::U8 => TypeRef::U8,
        Type::I16 => TypeRef::I16,
        Type::U16 => TypeRef::U16,
        Type::I32 => TypeRef::I32,
        Type::U32 => TypeRef::U32,
        Type::I64 => TypeRef::I64,
        Type::U64 => TypeRef::U64,
        Type::F32 => TypeRef::F32,
        Type::F64 => TypeRef::F64,
        Type::String(b) => TypeRef::String(b),
        Type::WString(b) => TypeRef::WString(b),
        Type::Sequence(i, b) => TypeRef::Sequence(Box::new(convert(spec, ids, &i)?), b),
        Type::Array(i, d) => TypeRef::Array(Box::new(convert(spec, ids, &i)?), d),
        Type::Named(n) => match ids.get(&join(&n)) {
            Some(id) => TypeRef::Named(*id),
            None => return Err(join(&n)),
        },
    })
}
