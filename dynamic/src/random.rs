//! Values of a type: the zero value (a template to edit) and seeded random values (for
//! `spindle pub --random` and the property tests that compare with generated code).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};
use spindle_idl::types::{TypeDef, TypeLibrary, TypeRef, UnionDef};

use crate::encode::int_range;
use crate::error::{Path, Result, Seg};
use crate::{DynType, DECODE_VALUES_MAX};

/// Deepest nesting a random or zero value builds (recursive types stop with empty
/// sequences there).
pub const VALUE_DEPTH_MAX: usize = 6;
/// Longest random string or sequence (shorter when the bound is smaller).
pub const RANDOM_LEN_MAX: u64 = 6;
/// Most values (members, elements) one zero or random value builds: as many as one
/// decoded sample may hold ([`DECODE_VALUES_MAX`]). IDL can declare far more
/// (`long a[4000000000]`); building them would exhaust memory.
pub const TEMPLATE_VALUES_MAX: usize = DECODE_VALUES_MAX;

/// Building a value stopped: it would exceed [`TEMPLATE_VALUES_MAX`].
pub(crate) struct TooBig {
    /// The member path where it stopped, innermost first (filled in while unwinding, so
    /// building pays nothing for it).
    rev_path: Vec<Seg>,
    detail: String,
}

impl TooBig {
    /// Adds the enclosing path step.
    fn at(mut self, s: Seg) -> Self {
        self.rev_path.push(s);
        self
    }

    /// The [`crate::Error::Value`] naming the member path from the type `root`.
    fn into_error(self, lib: &TypeLibrary, root: &TypeRef) -> crate::Error {
        let name = match root {
            TypeRef::Named(id) => lib.get(*id).name().to_string(),
            _ => String::from("value"),
        };
        let mut path = Path::new(&name);
        for s in self.rev_path.into_iter().rev() {
            path.push(s);
        }
        path.value_err(self.detail)
    }
}

/// A value being built, or why not.
type Built = std::result::Result<Value, TooBig>;

/// Counts one more value against `left` (what remains of [`TEMPLATE_VALUES_MAX`]).
fn spend(left: &mut usize) -> std::result::Result<(), TooBig> {
    *left = left.checked_sub(1).ok_or_else(|| TooBig {
        rev_path: Vec::new(),
        detail: format!(
            "more than {TEMPLATE_VALUES_MAX} values (TEMPLATE_VALUES_MAX) in one zero or \
             random value"
        ),
    })?;
    Ok(())
}

/// Refuses, before building any of it, an array whose elements alone exceed `left`.
fn check_array(dims: &[u64], left: usize) -> std::result::Result<(), TooBig> {
    if let Some(n) = crate::array_too_big(dims, left) {
        let shape: Vec<String> = dims.iter().map(|d| format!("[{d}]")).collect();
        return Err(TooBig {
            rev_path: Vec::new(),
            detail: format!(
                "an array of {n} elements ({}): more than the {TEMPLATE_VALUES_MAX} values \
                 (TEMPLATE_VALUES_MAX) a zero or random value builds ({left} left here)",
                shape.concat()
            ),
        });
    }
    Ok(())
}

/// The zero value of `t`, at most `left` values.
fn zero_in(lib: &TypeLibrary, t: &TypeRef, depth: usize, left: &mut usize) -> Built {
    spend(left)?;
    Ok(match t {
        TypeRef::Bool => Value::Bool(false),
        TypeRef::Char | TypeRef::WChar => Value::String("a".into()),
        TypeRef::F32 | TypeRef::F64 => Value::from(0.0),
        TypeRef::String(_) | TypeRef::WString(_) => Value::String(String::new()),
        TypeRef::Sequence(..) => Value::Array(Vec::new()),
        TypeRef::Array(inner, dims) => {
            check_array(dims, *left)?;
            zero_array(lib, inner, dims, depth, left)?
        }
        TypeRef::Named(id) => match lib.get(*id) {
            TypeDef::Enum(e) => Value::String(
                e.enumerators
                    .first()
                    .map(|x| x.0.clone())
                    .unwrap_or_default(),
            ),
            TypeDef::Struct(s) => {
                let mut obj = Map::new();
                for m in &s.members {
                    if !m.optional {
                        let v = zero_in(lib, &m.ty, depth + 1, left)
                            .map_err(|e| e.at(Seg::Member(m.name.clone())))?;
                        obj.insert(m.name.clone(), v);
                    }
                }
                Value::Object(obj)
            }
            TypeDef::Union(u) => {
                let mut obj = Map::new();
                // The first branch with a label (a default-only branch needs a value no
                // label names; the random generator finds one).
                if let Some(b) = u.branches.iter().find(|b| !b.labels.is_empty()) {
                    obj.insert("discriminator".into(), disc_json(lib, &u.disc, b.labels[0]));
                    let v = zero_in(lib, &b.member.ty, depth + 1, left)
                        .map_err(|e| e.at(Seg::Member(b.member.name.clone())))?;
                    obj.insert(b.member.name.clone(), v);
                } else {
                    let mut rng = ChaCha8Rng::seed_from_u64(0);
                    return random_union(lib, u, &mut rng, depth, left);
                }
                Value::Object(obj)
            }
        },
        _ => Value::from(0),
    })
}

/// An array's zero value; [`check_array`] bounded its element count.
fn zero_array(
    lib: &TypeLibrary,
    inner: &TypeRef,
    dims: &[u64],
    depth: usize,
    left: &mut usize,
) -> Built {
    match dims.split_first() {
        None => zero_in(lib, inner, depth, left),
        Some((&n, rest)) => {
            let mut items = Vec::with_capacity(to_len(n));
            for i in 0..to_len(n) {
                let v =
                    zero_array(lib, inner, rest, depth, left).map_err(|e| e.at(Seg::Index(i)))?;
                items.push(v);
            }
            Ok(Value::Array(items))
        }
    }
}

/// An array dimension as a length: [`check_array`] refused any past [`TEMPLATE_VALUES_MAX`].
fn to_len(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The JSON form of a discriminator value.
fn disc_json(lib: &TypeLibrary, t: &TypeRef, x: i128) -> Value {
    match t {
        TypeRef::Bool => Value::Bool(x != 0),
        TypeRef::Char | TypeRef::WChar => {
            Value::String(char::from_u32(x as u32).unwrap_or('?').to_string())
        }
        TypeRef::Named(id) => match lib.get(*id) {
            TypeDef::Enum(e) => e
                .enumerators
                .iter()
                .find(|(_, v)| i128::from(*v) == x)
                .map(|(n, _)| Value::String(n.clone()))
                .unwrap_or(Value::from(x as u64)),
            _ => Value::Null,
        },
        _ if x < 0 => Value::from(x as i64),
        _ => Value::from(x as u64),
    }
}

/// A random value of the discriminator type `t`, as an integer.
fn random_disc(lib: &TypeLibrary, t: &TypeRef, rng: &mut ChaCha8Rng) -> i128 {
    match t {
        TypeRef::Bool => i128::from(rng.gen_bool(0.5)),
        TypeRef::Char => i128::from(rng.gen_range(0u8..=127)),
        TypeRef::WChar => i128::from(u32::from(random_bmp(rng))),
        TypeRef::Named(id) => match lib.get(*id) {
            TypeDef::Enum(e) if !e.enumerators.is_empty() => {
                i128::from(e.enumerators[rng.gen_range(0..e.enumerators.len())].1)
            }
            _ => 0,
        },
        t => match int_range(t) {
            // Mostly small values, so labels get hit.
            Some((min, max, _)) if rng.gen_bool(0.7) => rng.gen_range(min.max(-8)..=max.min(8)),
            Some((min, max, _)) => rng.gen_range(min..=max),
            None => 0,
        },
    }
}

fn random_bmp(rng: &mut ChaCha8Rng) -> char {
    loop {
        let u: u32 = if rng.gen_bool(0.5) {
            rng.gen_range(0x20..0x7f)
        } else {
            rng.gen_range(0..=0xffff)
        };
        if let Some(c) = char::from_u32(u) {
            return c;
        }
    }
}

fn random_f64(rng: &mut ChaCha8Rng) -> f64 {
    match rng.gen_range(0..4) {
        0 => 0.0,
        1 => f64::from(rng.gen_range(-1000i32..1000)),
        2 => rng.gen_range(-1.0e6..1.0e6),
        _ => loop {
            let x = f64::from_bits(rng.gen());
            if x.is_finite() {
                return x;
            }
        },
    }
}

fn random_f32(rng: &mut ChaCha8Rng) -> f32 {
    match rng.gen_range(0..3) {
        0 => rng.gen_range(-1000.0f32..1000.0),
        1 => 0.0,
        _ => loop {
            let x = f32::from_bits(rng.gen());
            if x.is_finite() {
                return x;
            }
        },
    }
}

fn random_len(bound: Option<u64>, rng: &mut ChaCha8Rng, depth: usize) -> u64 {
    if depth >= VALUE_DEPTH_MAX {
        return 0;
    }
    rng.gen_range(0..=bound.unwrap_or(RANDOM_LEN_MAX).min(RANDOM_LEN_MAX))
}

/// A random value of `t`: finite floats, short strings and sequences, every union branch
/// and `@optional` presence reachable; at most `left` values.
pub(crate) fn random(
    lib: &TypeLibrary,
    t: &TypeRef,
    rng: &mut ChaCha8Rng,
    depth: usize,
    left: &mut usize,
) -> Built {
    spend(left)?;
    Ok(match t {
        TypeRef::Bool => Value::Bool(rng.gen_bool(0.5)),
        TypeRef::Char | TypeRef::WChar => disc_json(lib, t, random_disc(lib, t, rng)),
        TypeRef::F32 => Value::from(f64::from(random_f32(rng))),
        TypeRef::F64 => Value::from(random_f64(rng)),
        TypeRef::String(b) => {
            let n = random_len(*b, rng, 0);
            Value::String(
                (0..n)
                    .map(|_| char::from(rng.gen_range(b' '..=b'~')))
                    .collect(),
            )
        }
        TypeRef::WString(b) => {
            // Bound in code units: a character outside the BMP takes two.
            const WIDE: [char; 6] = ['a', 'é', 'Ω', '中', '\u{ffff}', '😀'];
            let n = random_len(*b, rng, 0);
            let mut s = String::new();
            let mut units = 0;
            while units < n {
                let c = WIDE[rng.gen_range(0..WIDE.len())];
                if units + c.len_utf16() as u64 > n {
                    break;
                }
                units += c.len_utf16() as u64;
                s.push(c);
            }
            Value::String(s)
        }
        TypeRef::Sequence(inner, b) => {
            let n = random_len(*b, rng, depth);
            let mut items = Vec::new();
            for i in 0..to_len(n) {
                let v =
                    random(lib, inner, rng, depth + 1, left).map_err(|e| e.at(Seg::Index(i)))?;
                items.push(v);
            }
            Value::Array(items)
        }
        TypeRef::Array(inner, dims) => {
            check_array(dims, *left)?;
            random_array(lib, inner, dims, rng, depth, left)?
        }
        TypeRef::Named(id) => match lib.get(*id) {
            TypeDef::Enum(_) => disc_json(lib, t, random_disc(lib, t, rng)),
            TypeDef::Struct(s) => {
                let mut obj = Map::new();
                for m in &s.members {
                    if m.optional && rng.gen_bool(0.5) {
                        continue;
                    }
                    let v = random(lib, &m.ty, rng, depth + 1, left)
                        .map_err(|e| e.at(Seg::Member(m.name.clone())))?;
                    obj.insert(m.name.clone(), v);
                }
                Value::Object(obj)
            }
            TypeDef::Union(u) => random_union(lib, u, rng, depth, left)?,
        },
        t => match int_range(t) {
            Some((min, max, _)) => {
                let x = rng.gen_range(min..=max);
                if x < 0 {
                    Value::from(x as i64)
                } else {
                    Value::from(x as u64)
                }
            }
            None => Value::Null,
        },
    })
}

/// An array's random value; [`check_array`] bounded its element count.
fn random_array(
    lib: &TypeLibrary,
    inner: &TypeRef,
    dims: &[u64],
    rng: &mut ChaCha8Rng,
    depth: usize,
    left: &mut usize,
) -> Built {
    match dims.split_first() {
        None => random(lib, inner, rng, depth + 1, left),
        Some((&n, rest)) => {
            let mut items = Vec::with_capacity(to_len(n));
            for i in 0..to_len(n) {
                let v = random_array(lib, inner, rest, rng, depth, left)
                    .map_err(|e| e.at(Seg::Index(i)))?;
                items.push(v);
            }
            Ok(Value::Array(items))
        }
    }
}

fn random_union(
    lib: &TypeLibrary,
    u: &UnionDef,
    rng: &mut ChaCha8Rng,
    depth: usize,
    left: &mut usize,
) -> Built {
    let labelled: Vec<i128> = u
        .branches
        .iter()
        .flat_map(|b| b.labels.iter().copied())
        .collect();
    // A discriminator: a label, or (for default and unselected) any value.
    let disc = if !labelled.is_empty() && rng.gen_bool(0.6) {
        labelled[rng.gen_range(0..labelled.len())]
    } else {
        random_disc(lib, &u.disc, rng)
    };
    let mut obj = Map::new();
    obj.insert("discriminator".into(), disc_json(lib, &u.disc, disc));
    if let Some(b) = crate::select_branch(u, disc) {
        let v = random(lib, &b.member.ty, rng, depth + 1, left)
            .map_err(|e| e.at(Seg::Member(b.member.name.clone())))?;
        obj.insert(b.member.name.clone(), v);
    }
    Ok(Value::Object(obj))
}

impl DynType {
    /// A random value of the type from `seed` (the same seed, the same value): finite
    /// floats, strings and sequences of at most [`RANDOM_LEN_MAX`] elements within their
    /// bounds, random union branches and `@optional` presence. [`crate::Error::Value`]
    /// naming the member path when the value would exceed [`TEMPLATE_VALUES_MAX`] values
    /// (`long a[4000000000]`; nothing that large is built).
    pub fn random_json(&self, seed: u64) -> Result<Value> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut left = TEMPLATE_VALUES_MAX;
        random(&self.lib, &self.root, &mut rng, 0, &mut left)
            .map_err(|e| e.into_error(&self.lib, &self.root))
    }

    /// A value of the type with every member at its zero: numbers 0, empty strings and
    /// sequences, first enumerators, the first branch of unions, optional members absent.
    /// A template for writing samples by hand. [`crate::Error::Value`] naming the member
    /// path when the value would exceed [`TEMPLATE_VALUES_MAX`] values (nothing that
    /// large is built).
    pub fn zero_json(&self) -> Result<Value> {
        let mut left = TEMPLATE_VALUES_MAX;
        zero_in(&self.lib, &self.root, 0, &mut left)
            .map_err(|e| e.into_error(&self.lib, &self.root))
    }
}
