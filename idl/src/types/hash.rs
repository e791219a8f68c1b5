//! The structural hash of a type: what two programs compare to know that one type name
//! means one definition on both sides ([`TypeLibrary::type_hash`]).

use std::collections::BTreeMap;

use super::{MemberDef, TypeDef, TypeId, TypeLibrary, TypeRef};

/// Deepest nesting the hash expands (named types, sequences and arrays inside one
/// another, counted together); deeper parts are cut off ([`TypeLibrary::type_hash`]).
pub const TYPE_HASH_DEPTH_MAX: usize = 256;

/// Step budget of one type's hash (one step per member, enumerator, union branch and
/// type visited); past it, the nested types not expanded yet are cut off.
pub const TYPE_HASH_STEPS_MAX: u64 = 1 << 20;

/// FNV-1a 64, as `spindle_dds_core::topic_id` hashes names.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The tag bytes of the canonical form.
mod tag {
    pub const BOOL: u8 = 0x01;
    pub const OCTET: u8 = 0x02;
    pub const CHAR: u8 = 0x03;
    pub const WCHAR: u8 = 0x04;
    pub const I8: u8 = 0x05;
    pub const U8: u8 = 0x06;
    pub const I16: u8 = 0x07;
    pub const U16: u8 = 0x08;
    pub const I32: u8 = 0x09;
    pub const U32: u8 = 0x0a;
    pub const I64: u8 = 0x0b;
    pub const U64: u8 = 0x0c;
    pub const F32: u8 = 0x0d;
    pub const F64: u8 = 0x0e;
    pub const STRING: u8 = 0x10;
    pub const WSTRING: u8 = 0x11;
    pub const SEQUENCE: u8 = 0x12;
    pub const ARRAY: u8 = 0x13;
    pub const STRUCT: u8 = 0x20;
    pub const UNION: u8 = 0x21;
    pub const ENUM: u8 = 0x22;
    pub const NESTED: u8 = 0x30;
    pub const BACK_REF: u8 = 0x31;
    pub const CUT: u8 = 0x32;
}

/// Member flag bits.
const FLAG_KEY: u8 = 1;
const FLAG_OPTIONAL: u8 = 2;

/// An FNV-1a 64 digest fed with the canonical form's fields.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(FNV_OFFSET)
    }

    fn bytes(&mut self, b: &[u8]) {
        for x in b {
            self.0 ^= u64::from(*x);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    /// A count or a position (lossless: `usize` is at most 64 bits on every target).
    fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }

    fn i128(&mut self, v: i128) {
        self.bytes(&v.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.bytes(s.as_bytes());
    }

    fn bound(&mut self, b: Option<u64>) {
        match b {
            None => self.u8(0),
            Some(n) => {
                self.u8(1);
                self.u64(n);
            }
        }
    }
}

/// Reached no type outside the one being expanded.
const REACH_NONE: usize = usize::MAX;

/// One hash computation: the walk over the type's expansion.
struct Walk<'a> {
    lib: &'a TypeLibrary,
    /// The named types being expanded, outermost (the hashed type) first.
    stack: Vec<TypeId>,
    /// Digests of the named types whose forms do not depend on where they are reached
    /// (no back-reference out of them): the same bytes wherever they are expanded.
    memo: BTreeMap<TypeId, u64>,
    /// Nesting of the current position ([`TYPE_HASH_DEPTH_MAX`]).
    depth: usize,
    steps: u64,
}

impl Walk<'_> {
    /// The digest of `id`'s form, and the outermost stack position a back-reference in
    /// it reaches when that is outside `id` itself ([`REACH_NONE`] if none does: the
    /// form is then the same wherever `id` is reached, and is remembered).
    fn named(&mut self, id: TypeId) -> (u64, usize) {
        let me = self.stack.len();
        self.stack.push(id);
        self.depth += 1;
        let mut h = Fnv::new();
        let mut reach = REACH_NONE;
        match self.lib.get(id) {
            TypeDef::Struct(s) => {
                h.u8(tag::STRUCT);
                h.len(s.members.len());
                for m in &s.members {
                    reach = reach.min(self.member(&mut h, m));
                }
            }
            TypeDef::Union(u) => {
                h.u8(tag::UNION);
                reach = reach.min(self.ty(&mut h, &u.disc));
                h.len(u.branches.len());
                for b in &u.branches {
                    self.steps += 1;
                    h.len(b.labels.len());
                    for l in &b.labels {
                        h.i128(*l);
                    }
                    h.u8(u8::from(b.default));
                    reach = reach.min(self.member(&mut h, &b.member));
                }
            }
            TypeDef::Enum(e) => {
                h.u8(tag::ENUM);
                h.len(e.enumerators.len());
                for (name, value) in &e.enumerators {
                    self.steps += 1;
                    h.str(name);
                    h.u32(*value);
                }
            }
        }
        self.depth -= 1;
        self.stack.pop();
        let digest = h.0;
        if reach >= me {
            self.memo.insert(id, digest);
            (digest, REACH_NONE)
        } else {
            (digest, reach)
        }
    }

    /// A member: name, flags, the member id of an `@optional` one, its type.
    fn member(&mut self, h: &mut Fnv, m: &MemberDef) -> usize {
        self.steps += 1;
        h.str(&m.name);
        let mut flags = 0;
        if m.key {
            flags |= FLAG_KEY;
        }
        if m.optional {
            flags |= FLAG_OPTIONAL;
        }
        h.u8(flags);
        if m.optional {
            // Its parameter header carries the id on the wire.
            h.u32(m.id);
        }
        self.ty(h, &m.ty)
    }

    /// A type; returns the outermost stack position a back-reference in it reaches.
    fn ty(&mut self, h: &mut Fnv, t: &TypeRef) -> usize {
        self.steps += 1;
        let prim = match t {
            TypeRef::Bool => tag::BOOL,
            TypeRef::Octet => tag::OCTET,
            TypeRef::Char => tag::CHAR,
            TypeRef::WChar => tag::WCHAR,
            TypeRef::I8 => tag::I8,
            TypeRef::U8 => tag::U8,
            TypeRef::I16 => tag::I16,
            TypeRef::U16 => tag::U16,
            TypeRef::I32 => tag::I32,
            TypeRef::U32 => tag::U32,
            TypeRef::I64 => tag::I64,
            TypeRef::U64 => tag::U64,
            TypeRef::F32 => tag::F32,
            TypeRef::F64 => tag::F64,
            TypeRef::String(b) => {
                h.u8(tag::STRING);
                h.bound(*b);
                return REACH_NONE;
            }
            TypeRef::WString(b) => {
                h.u8(tag::WSTRING);
                h.bound(*b);
                return REACH_NONE;
            }
            TypeRef::Sequence(..) | TypeRef::Array(..) | TypeRef::Named(_) => {
                return self.composite(h, t)
            }
        };
        h.u8(prim);
        REACH_NONE
    }

    /// A sequence, an array or a named type.
    fn composite(&mut self, h: &mut Fnv, t: &TypeRef) -> usize {
        if let TypeRef::Named(id) = t {
            if let Some(pos) = self.stack.iter().rposition(|x| x == id) {
                // Reached again while being expanded: how many levels up.
                h.u8(tag::BACK_REF);
                h.len(self.stack.len() - 1 - pos);
                return pos;
            }
            if let Some(d) = self.memo.get(id) {
                h.u8(tag::NESTED);
                h.u64(*d);
                return REACH_NONE;
            }
        }
        if self.depth >= TYPE_HASH_DEPTH_MAX || self.steps > TYPE_HASH_STEPS_MAX {
            h.u8(tag::CUT);
            // Where the cut falls depends on the context: nothing around it is reused.
            return 0;
        }
        match t {
            TypeRef::Sequence(e, b) => {
                h.u8(tag::SEQUENCE);
                h.bound(*b);
                self.depth += 1;
                let r = self.ty(h, e);
                self.depth -= 1;
                r
            }
            TypeRef::Array(e, dims) => {
                h.u8(tag::ARRAY);
                h.len(dims.len());
                for d in dims {
                    h.u64(*d);
                }
                self.depth += 1;
                let r = self.ty(h, e);
                self.depth -= 1;
                r
            }
            TypeRef::Named(id) => {
                let (d, reach) = self.named(*id);
                h.u8(tag::NESTED);
                h.u64(d);
                reach
            }
            _ => REACH_NONE,
        }
    }
}

impl TypeLibrary {
    /// The structural hash of type `id`: a 64-bit FNV-1a (the constants of
    /// `spindle_dds_core::topic_id`) of the canonical form of its definition, never 0.
    /// Two programs that give one type name to different definitions get different
    /// hashes (so their readers and writers do not match); the same definition written
    /// differently gets the same one.
    ///
    /// The canonical form (integers little-endian; a count or position is a `u64`, a
    /// name is its byte length as a `u64` and its UTF-8 bytes; a bound is `0`, or `1`
    /// and the bound as a `u64`):
    ///
    /// * a struct: tag `0x20`, the member count, then each member, base struct members
    ///   first (inheritance is flattened, so `struct D : B { .. }` equals the struct with
    ///   `B`'s members written out);
    /// * a member: its name, a flags byte (1 `@key`, 2 `@optional`), for an `@optional`
    ///   member its member id (`u32`: its XCDR1 parameter header carries it), then its
    ///   type;
    /// * a union: tag `0x21`, the discriminator's type, the branch count, then for each
    ///   branch its label count, each label as an `i128` (enumerators as their value,
    ///   `char` as its code, `boolean` as 0/1), a `default` byte (0/1) and its member;
    /// * an enum: tag `0x22`, the enumerator count, then each enumerator's name and value
    ///   (`u32`);
    /// * primitive types: one tag byte each (`boolean` 0x01, `octet` 0x02, `char` 0x03,
    ///   `wchar` 0x04, `int8` … `uint64` 0x05 … 0x0c in signed/unsigned pairs by width,
    ///   `float` 0x0d, `double` 0x0e);
    /// * `string<N>` tag `0x10` and its bound, `wstring<N>` `0x11` and its bound;
    ///   `sequence<T, N>` `0x12`, its bound, then `T`; an array `0x13`, the number of
    ///   dimensions, each dimension (`u64`, outermost first), then the element type;
    /// * a typedef is the type it names (already so in the library), so a typedef'd
    ///   member hashes as the aliased type written out;
    /// * a nested struct, union or enum: tag `0x30` and the 64-bit FNV-1a of its own
    ///   canonical form (its scoped name does not count: only the hashed type's own name,
    ///   which the DDS type name already carries, tells types apart by name);
    /// * a type reached again while it is being expanded (a recursive type,
    ///   `struct Node { sequence<Node> next; }`): tag `0x31` and how many nested types up
    ///   it is (0: the innermost one being expanded), so the walk ends.
    ///
    /// So comments, whitespace, the order of unrelated declarations, module paths of
    /// nested types and the file a type comes from do not change the hash; member names,
    /// order and types, `@key`, `@optional`, bounds, dimensions, enumerators and their
    /// values, and union labels do. `@final`/`@appendable` (XCDR1 plain CDR encodes both
    /// alike), `@bit_bound` (enums are 32-bit on the wire) and `@id` of a member that is
    /// not `@optional` do not count. A type nested deeper than [`TYPE_HASH_DEPTH_MAX`],
    /// or one whose walk exceeds [`TYPE_HASH_STEPS_MAX`] steps, is cut off there (tag
    /// `0x32`): definitions that differ only beyond the cut hash alike, and then match
    /// by name only.
    ///
    /// ```
    /// use spindle_idl::types::TypeLibrary;
    /// let hash = |idl: &str| {
    ///     let lib = TypeLibrary::from_source("x.idl", idl, &[] as &[&str]).unwrap();
    ///     lib.type_hash(lib.lookup("T::Plain").unwrap())
    /// };
    /// let plain = hash("module T { struct Plain { long x; }; };");
    /// // Another definition of the same name: another hash.
    /// assert_ne!(plain, hash("module T { struct Plain { string<8> x; double y; }; };"));
    /// // A typedef'd member is the type it aliases; comments do not count.
    /// assert_eq!(
    ///     plain,
    ///     hash("module T { typedef long Count; /* a count */ struct Plain { Count x; }; };")
    /// );
    /// ```
    pub fn type_hash(&self, id: TypeId) -> u64 {
        let mut w = Walk {
            lib: self,
            stack: Vec::new(),
            memo: BTreeMap::new(),
            depth: 0,
            steps: 0,
        };
        let (digest, _) = w.named(id);
        // 0 says "unknown" where the hash is announced.
        digest.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash of `name` in IDL text `idl`.
    fn hash(idl: &str, name: &str) -> u64 {
        let lib = TypeLibrary::from_source("t.idl", idl, &[] as &[&str])
            .unwrap_or_else(|e| panic!("{e}\n{idl}"));
        let id = lib
            .lookup(name)
            .unwrap_or_else(|| panic!("no {name} in\n{idl}"));
        lib.type_hash(id)
    }

    /// `module T { <body> };`'s `T::S`.
    fn s(body: &str) -> u64 {
        hash(&format!("module T {{ {body} }};"), "T::S")
    }

    #[test]
    fn definitions_that_differ_hash_differently() {
        let pairs = [
            (
                "member type",
                "struct S { long x; };",
                "struct S { short x; };",
            ),
            (
                "member name",
                "struct S { long x; };",
                "struct S { long y; };",
            ),
            (
                "member order",
                "struct S { long x; short y; };",
                "struct S { short y; long x; };",
            ),
            (
                "an added member",
                "struct S { long x; };",
                "struct S { long x; long y; };",
            ),
            (
                "string bound",
                "struct S { string<8> x; };",
                "struct S { string<9> x; };",
            ),
            (
                "bounded or not",
                "struct S { string<8> x; };",
                "struct S { string x; };",
            ),
            (
                "string or wstring",
                "struct S { string<8> x; };",
                "struct S { wstring<8> x; };",
            ),
            (
                "sequence bound",
                "struct S { sequence<long, 4> x; };",
                "struct S { sequence<long, 5> x; };",
            ),
            (
                "sequence element",
                "struct S { sequence<long> x; };",
                "struct S { sequence<unsigned long> x; };",
            ),
            (
                "array dimensions",
                "struct S { long x[2][3]; };",
                "struct S { long x[3][2]; };",
            ),
            (
                "array rank",
                "struct S { long x[6]; };",
                "struct S { long x[2][3]; };",
            ),
            (
                "key flag",
                "struct S { @key long x; };",
                "struct S { long x; };",
            ),
            (
                "optional flag",
                "struct S { @optional long x; };",
                "struct S { long x; };",
            ),
            (
                "an optional member's id",
                "struct S { @optional @id(3) long x; };",
                "struct S { @optional @id(4) long x; };",
            ),
            (
                "enumerator value",
                "enum E { A, B }; struct S { E e; };",
                "enum E { A, @value(5) B }; struct S { E e; };",
            ),
            (
                "enumerator name",
                "enum E { A, B }; struct S { E e; };",
                "enum E { A, C }; struct S { E e; };",
            ),
            (
                "union label",
                "union U switch (long) { case 1: long a; case 2: short b; }; struct S { U u; };",
                "union U switch (long) { case 1: long a; case 3: short b; }; struct S { U u; };",
            ),
            (
                "union default",
                "union U switch (long) { case 1: long a; case 2: short b; }; struct S { U u; };",
                "union U switch (long) { case 1: long a; default: short b; }; struct S { U u; };",
            ),
            (
                "union discriminator",
                "union U switch (long) { case 1: long a; }; struct S { U u; };",
                "union U switch (short) { case 1: long a; }; struct S { U u; };",
            ),
            (
                "union branch member",
                "union U switch (long) { case 1: long a; }; struct S { U u; };",
                "union U switch (long) { case 1: long b; }; struct S { U u; };",
            ),
            (
                "a nested struct's member",
                "struct P { long x; }; struct S { P p; };",
                "struct P { long x; long y; }; struct S { P p; };",
            ),
            (
                "a struct nested two deep",
                "struct Q { long q; }; struct P { Q x; }; struct S { P p; };",
                "struct Q { short q; }; struct P { Q x; }; struct S { P p; };",
            ),
            (
                "a nested enum or a long",
                "enum E { A }; struct S { E e; };",
                "struct S { long e; };",
            ),
            (
                "a base struct's member",
                "struct B { long b; }; struct S : B { long x; };",
                "struct B { short b; }; struct S : B { long x; };",
            ),
        ];
        for (what, a, b) in pairs {
            assert_ne!(s(a), s(b), "{what}: {a} vs {b}");
        }
    }

    #[test]
    fn the_same_definition_written_differently_hashes_alike() {
        let pairs = [
            (
                "typedef of a primitive",
                "struct S { long x; };",
                "typedef long L; struct S { L x; };",
            ),
            (
                "typedef of a bounded string and sequence",
                "struct S { string<8> n; sequence<long, 4> v; };",
                "typedef string<8> Name; typedef sequence<long, 4> Vs; struct S { Name n; Vs v; };",
            ),
            (
                "typedef of an array (dimensions merge)",
                "struct S { long m[2][3]; };",
                "typedef long Row[3]; struct S { Row m[2]; };",
            ),
            (
                "typedef of a struct",
                "struct P { long x; }; struct S { P p; };",
                "struct P { long x; }; typedef P Alias; struct S { Alias p; };",
            ),
            (
                "comments and whitespace",
                "struct S { long x; double y; };",
                "/* a type */ struct   S {\n  long x; // the x\n\n  double\ty;\n};",
            ),
            (
                "unrelated declarations around it",
                "struct S { long x; };",
                "struct Before { string b; }; const long K = 3; struct S { long x; }; \
                 enum After { ONE };",
            ),
            (
                "a nested struct's own name and module",
                "struct P { long x; }; struct S { P p; };",
                "module Deep { module Er { struct Other { long x; }; }; }; \
                 struct S { Deep::Er::Other p; };",
            ),
            (
                "a nested enum's name",
                "enum E { A, B }; struct S { E e; };",
                "enum Colour { A, B }; struct S { Colour e; };",
            ),
            (
                "inheritance written out",
                "struct B { long b; }; struct S : B { long x; };",
                "struct S { long b; long x; };",
            ),
            (
                "constant expressions",
                "struct S { string<8> x; long a[4]; };",
                "const long N = 2; struct S { string<N * 4> x; long a[N + N]; };",
            ),
        ];
        for (what, a, b) in pairs {
            assert_eq!(s(a), s(b), "{what}: {a} vs {b}");
        }
        // The top-level module path is the type name's, not the structure's.
        assert_eq!(
            hash("module A { struct S { long x; }; };", "A::S"),
            hash(
                "module B { module C { struct S { long x; }; }; };",
                "B::C::S"
            )
        );
        // The file it comes from (its name in diagnostics) does not count either.
        let lib = TypeLibrary::from_source(
            "other.idl",
            "module T { struct S { long x; }; };",
            &[] as &[&str],
        )
        .unwrap();
        assert_eq!(
            lib.type_hash(lib.lookup("T::S").unwrap()),
            s("struct S { long x; };")
        );
    }

    #[test]
    fn recursive_types_terminate_and_are_told_apart() {
        let node = s("struct S; struct S { long v; sequence<S> next; };");
        let other = s("struct S; struct S { short v; sequence<S> next; };");
        assert_ne!(node, other);
        // Mutual recursion through a union and a second struct.
        let tree = "struct S; struct Leaf { long v; }; \
                    union Kid switch (boolean) { case TRUE: Leaf leaf; case FALSE: sequence<S> sub; }; \
                    struct S { sequence<Kid> kids; };";
        assert_eq!(s(tree), s(tree));
        let two = s("struct S; struct L { sequence<S> back; long w; }; struct S { L l; long v; };");
        assert_ne!(
            two,
            s("struct S; struct L { sequence<S> back; long w; }; struct S { L l; short v; };")
        );
        // A type reached from two recursive types is hashed in each one's context.
        let lib = TypeLibrary::from_source(
            "t.idl",
            "module T { struct A; struct B; struct A { sequence<B> b; long a; }; \
             struct B { sequence<A> a; short b; }; };",
            &[] as &[&str],
        )
        .unwrap();
        let (a, b) = (lib.lookup("T::A").unwrap(), lib.lookup("T::B").unwrap());
        assert_ne!(lib.type_hash(a), lib.type_hash(b));
    }

    /// A type whose expansion doubles at each level (each struct has two members of the
    /// next) is hashed in linear time: nested types are remembered by their digests.
    #[test]
    fn shared_nested_types_are_hashed_once() {
        let mut idl = String::from("struct L0 { long x; };");
        for i in 1..200 {
            idl.push_str(&format!("struct L{i} {{ L{} a; L{} b; }};", i - 1, i - 1));
        }
        let top = s(&format!("{idl} struct S {{ L199 top; }};"));
        let mut changed = idl.replacen("struct L0 { long x; };", "struct L0 { short x; };", 1);
        changed.push_str(" struct S { L199 top; };");
        assert_ne!(top, s(&changed), "the innermost member still counts");
    }

    #[test]
    fn hashes_are_never_zero_and_do_not_depend_on_library_ids() {
        // The same struct among other types (other ids) hashes alike.
        let alone = s("struct P { long x; }; struct S { P p; };");
        let among = s(
            "struct A1 { long q; }; struct P { long x; }; struct Z { P z; }; \
                       struct S { P p; };",
        );
        assert_eq!(alone, among);
        assert_ne!(alone, 0);
    }
}
