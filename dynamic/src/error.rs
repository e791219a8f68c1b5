//! The crate's one error enum.

/// Everything that can go wrong describing, encoding or decoding a dynamic type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The IDL file could not be read or is not valid IDL.
    #[error("{0}")]
    Idl(#[from] spindle_idl::Error),
    /// The IDL defines no type of that name.
    #[error("no type `{name}` in the IDL (its structs: {known})")]
    UnknownType {
        /// The name asked for.
        name: String,
        /// The structs it does define, comma separated.
        known: String,
    },
    /// A topic's type must be a struct.
    #[error("`{name}` is {kind}, not a struct: a topic's type is a struct")]
    NotAStruct {
        /// The name asked for.
        name: String,
        /// "a union" or "an enum".
        kind: &'static str,
    },
    /// The text is not JSON.
    #[error("malformed JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A JSON value does not fit the type: wrong kind, unknown or missing member, out of
    /// range, over its bound.
    #[error("{path}: {detail}")]
    Value {
        /// The member path (`Avionics::FlightPlan.route[3].name`).
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// CDR bytes that are not a valid encoding of the type.
    #[error("{path}: cannot decode at byte {offset}: {detail}")]
    Decode {
        /// The member path being decoded.
        path: String,
        /// Offset in the input (encapsulation header included).
        offset: usize,
        /// What is wrong.
        detail: String,
    },
    /// The encapsulation header is missing or not XCDR1 plain CDR.
    #[error("{0}")]
    Encapsulation(spindle_topics::Error),
    /// The type's worst-case size takes too long to compute (huge nested bounded
    /// collections); the generated code would not compile in reasonable time either.
    #[error("type `{name}`: worst-case size needs more than {steps} steps to compute")]
    TooComplex {
        /// The type.
        name: String,
        /// The step budget ([`crate::SIZE_STEPS_MAX`]).
        steps: u64,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One step of a member path.
#[derive(Debug, Clone)]
pub(crate) enum Seg {
    /// `.name`
    Member(String),
    /// `[i]`
    Index(usize),
}

/// The member path of the value being encoded or decoded, rendered only on error.
#[derive(Debug, Clone)]
pub(crate) struct Path {
    root: String,
    segs: Vec<Seg>,
}

impl Path {
    pub(crate) fn new(root: &str) -> Self {
        Path {
            root: root.to_string(),
            segs: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, s: Seg) {
        self.segs.push(s);
    }

    pub(crate) fn pop(&mut self) {
        self.segs.pop();
    }

    pub(crate) fn depth(&self) -> usize {
        self.segs.len()
    }

    pub(crate) fn render(&self) -> String {
        let mut out = self.root.clone();
        for s in &self.segs {
            match s {
                Seg::Member(m) => {
                    out.push('.');
                    out.push_str(m);
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// A [`Error::Value`] at this path.
    pub(crate) fn value_err(&self, detail: impl Into<String>) -> Error {
        Error::Value {
            path: self.render(),
            detail: detail.into(),
        }
    }
}
