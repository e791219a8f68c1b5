//! The checked, resolved form of an IDL specification that the code generator reads.

use crate::lexer::Pos;

/// A scoped IDL name, outermost module first.
pub type Scoped = Vec<String>;

/// A resolved IDL type. Typedef names stay [`Type::Named`]; the generator expands them.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    Bool,
    Octet,
    Char,
    WChar,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    /// `string` / `string<N>`.
    String(Option<u64>),
    /// `wstring` / `wstring<N>` (the bound in UTF-16 code units).
    WString(Option<u64>),
    /// `sequence<T>` / `sequence<T, N>`.
    Sequence(Box<Type>, Option<u64>),
    /// `T m[N][M]`: dimensions outermost first.
    Array(Box<Type>, Vec<u64>),
    /// A struct, union, enum or typedef.
    Named(Scoped),
}

/// A constant's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i128),
    Float(f64),
    Str(String),
    Char(char),
    Bool(bool),
    /// An enumerator: the enum's scoped name, the enumerator, its value.
    Enumerator(Scoped, String, u32),
}

/// A struct member (or union branch member).
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    pub ty: Type,
    pub key: bool,
    pub optional: bool,
    /// `@id`, when given.
    pub id: Option<u32>,
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Struct {
    pub name: Scoped,
    pub base: Option<Scoped>,
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Enum {
    pub name: Scoped,
    pub enumerators: Vec<(String, u32)>,
    /// Where each enumerator is declared.
    pub positions: Vec<Pos>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    /// Label values, coerced to the discriminator type.
    pub labels: Vec<Value>,
    pub default: bool,
    pub member: Member,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Union {
    pub name: Scoped,
    /// The discriminator type, typedefs expanded.
    pub disc: Type,
    pub branches: Vec<Branch>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Typedef {
    pub name: Scoped,
    pub ty: Type,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Const {
    pub name: Scoped,
    /// Declared type, typedefs expanded.
    pub ty: Type,
    pub value: Value,
}

/// One definition, in source order.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Module(String, Vec<Item>),
    Struct(Struct),
    Union(Union),
    Enum(Enum),
    Typedef(Typedef),
    Const(Const),
}
