//! Worst-case sizes, computed exactly as the generated code computes its
//! `MAX_SERIALIZED_SIZE` and `KEY_MAX_SERIALIZED_SIZE` (the key hash depends on the
//! latter: a key that can never exceed 16 bytes is the hash itself, else its MD5).

use std::collections::{HashMap, HashSet};

use spindle_idl::types::{TypeDef, TypeId, TypeLibrary, TypeRef, SIZE_LOOP_MAX};
use spindle_topics::cdr::MaxSize;

/// Bytes of a primitive (and its alignment), `None` for anything else.
pub(crate) fn prim_size(t: &TypeRef) -> Option<usize> {
    Some(match t {
        TypeRef::Bool | TypeRef::Octet | TypeRef::Char | TypeRef::I8 | TypeRef::U8 => 1,
        TypeRef::WChar | TypeRef::I16 | TypeRef::U16 => 2,
        TypeRef::I32 | TypeRef::U32 | TypeRef::F32 => 4,
        TypeRef::I64 | TypeRef::U64 | TypeRef::F64 => 8,
        _ => return None,
    })
}

/// An IDL bound or element count as a `usize`, saturated (a size past `usize::MAX` is
/// `usize::MAX` in [`MaxSize`] anyway).
fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The sizer: whether types are bounded (memoized) and their worst-case sizes, within a
/// step budget.
pub(crate) struct Sizer<'a> {
    lib: &'a TypeLibrary,
    memo: HashMap<TypeId, bool>,
    steps_left: u64,
}

/// The budget ran out.
pub(crate) struct OutOfSteps;

impl<'a> Sizer<'a> {
    pub(crate) fn new(lib: &'a TypeLibrary, steps: u64) -> Self {
        Sizer {
            lib,
            memo: HashMap::new(),
            steps_left: steps,
        }
    }

    fn is_enum(&self, t: &TypeRef) -> bool {
        matches!(t, TypeRef::Named(id) if matches!(self.lib.get(*id), TypeDef::Enum(_)))
    }

    /// Element size when a collection of `t` is sized in one step (primitives, enums).
    fn flat_size(&self, t: &TypeRef) -> Option<usize> {
        prim_size(t).or_else(|| self.is_enum(t).then_some(4))
    }

    fn bounded_named(&mut self, id: TypeId, visiting: &mut HashSet<TypeId>) -> bool {
        if let Some(b) = self.memo.get(&id) {
            return *b;
        }
        if !visiting.insert(id) {
            return false;
        }
        let r = match self.lib.get(id) {
            TypeDef::Struct(s) => s.members.iter().all(|m| self.bounded_in(&m.ty, visiting)),
            TypeDef::Union(u) => u
                .branches
                .iter()
                .all(|b| self.bounded_in(&b.member.ty, visiting)),
            TypeDef::Enum(_) => true,
        };
        visiting.remove(&id);
        self.memo.insert(id, r);
        r
    }

    fn bounded_in(&mut self, t: &TypeRef, visiting: &mut HashSet<TypeId>) -> bool {
        match t {
            TypeRef::String(b) | TypeRef::WString(b) => b.is_some(),
            TypeRef::Sequence(i, Some(n)) => {
                (self.flat_size(i).is_some() || *n <= SIZE_LOOP_MAX) && self.bounded_in(i, visiting)
            }
            TypeRef::Sequence(_, None) => false,
            TypeRef::Array(i, dims) => {
                let n = dims.iter().fold(1u64, |a, d| a.saturating_mul(*d));
                (self.flat_size(i).is_some() || n <= SIZE_LOOP_MAX) && self.bounded_in(i, visiting)
            }
            TypeRef::Named(id) => self.bounded_named(*id, visiting),
            _ => true,
        }
    }

    /// True when every value of `t` has a worst-case size the generated code computes.
    pub(crate) fn bounded(&mut self, t: &TypeRef) -> bool {
        self.bounded_in(t, &mut HashSet::new())
    }

    fn step(&mut self) -> Result<(), OutOfSteps> {
        self.steps_left = self.steps_left.checked_sub(1).ok_or(OutOfSteps)?;
        Ok(())
    }

    /// The worst-case state after a value of (bounded) `t`, starting from `s`.
    pub(crate) fn size(&mut self, t: &TypeRef, s: MaxSize) -> Result<MaxSize, OutOfSteps> {
        self.step()?;
        if let Some(k) = prim_size(t) {
            return Ok(s.primitive(k));
        }
        Ok(match t {
            TypeRef::String(Some(n)) => s.string(to_usize(*n)),
            TypeRef::WString(Some(n)) => s.wstring(to_usize(*n)),
            TypeRef::Sequence(i, Some(n)) => {
                if let Some(k) = self.flat_size(i) {
                    return Ok(s.primitive_sequence(k, to_usize(*n)));
                }
                let mut cur = s.primitive(4);
                let mut all = cur;
                for _ in 0..*n {
                    cur = self.size(i, cur)?;
                    all = all.either(cur);
                }
                all
            }
            TypeRef::Array(i, dims) => {
                let n = dims.iter().fold(1u64, |a, d| a.saturating_mul(*d));
                if let Some(k) = self.flat_size(i) {
                    // Saturates past usize::MAX: `max_serialized_size` is then
                    // `Some(usize::MAX)`, no usable bound (see `MaxSize`).
                    return Ok(s.primitive_array(k, to_usize(n)));
                }
                let mut cur = s;
                for _ in 0..n {
                    cur = self.size(i, cur)?;
                }
                cur
            }
            TypeRef::Named(id) => match self.lib.get(*id) {
                TypeDef::Enum(_) => s.primitive(4),
                TypeDef::Struct(st) => {
                    let mut cur = s;
                    for m in &st.members {
                        cur = if m.optional {
                            let inner = self.size(&m.ty, MaxSize::start())?;
                            cur.optional(inner.size())
                        } else {
                            self.size(&m.ty, cur)?
                        };
                    }
                    cur
                }
                TypeDef::Union(u) => {
                    let d = s.primitive(prim_size(&u.disc).unwrap_or(4));
                    let mut all: Option<MaxSize> = None;
                    for b in &u.branches {
                        let p = self.size(&b.member.ty, d)?;
                        all = Some(all.map_or(p, |a| a.either(p)));
                    }
                    if u.unselected {
                        all = Some(all.map_or(d, |a| a.either(d)));
                    }
                    all.unwrap_or(d)
                }
            },
            // Unbounded: callers size only bounded types.
            _ => s,
        })
    }
}
