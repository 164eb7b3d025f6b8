//! Errors of the wire layer: every way a byte string can fail to be a valid v1 object.

/// Why bytes could not be parsed as a v1 wire object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the fixed layout needs.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the layout needs.
        need: usize,
        /// Bytes that were there.
        have: usize,
    },
    /// The first two bytes are not the Hamlyn magic.
    #[error("bad magic {0:#06x} (expected 0x4d48)")]
    BadMagic(u16),
    /// A version this build does not speak.
    #[error("unsupported version {0}")]
    UnsupportedVersion(u8),
    /// An operation code that is not defined.
    #[error("unknown op {0}")]
    UnknownOp(u8),
    /// Flag bits that are not defined in v1 are set.
    #[error("undefined flag bits {0:#06x}")]
    UnknownFlags(u16),
    /// Metadata longer than the 60 bytes a metadata entry holds.
    #[error("metadata length {0} exceeds 60")]
    MetaTooLong(u16),
    /// Metadata on a packet that is not the first of its message.
    #[error("metadata on a packet that is not FIRST")]
    MetaNotFirst,
    /// A packet's stated lengths do not match the bytes that carry it.
    #[error("length mismatch: header says {stated} bytes, packet has {actual}")]
    LengthMismatch {
        /// Length the header implies (header + metadata + payload).
        stated: u64,
        /// Length of the bytes given.
        actual: usize,
    },
    /// A field holds a value outside its allowed range.
    #[error("invalid field {field}: {why}")]
    InvalidField {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A seed string does not start with the `hmseed1-` prefix.
    #[error("not a Hamlyn seed (expected prefix \"hmseed1-\")")]
    BadSeedPrefix,
    /// A seed string contains a character outside its alphabet.
    #[error("bad character {ch:?} at position {pos} of the seed")]
    BadSeedChar {
        /// The offending character.
        ch: char,
        /// Its position in the string (after trimming).
        pos: usize,
    },
    /// A seed's checksum does not match: it was mistyped or cut.
    #[error("seed checksum mismatch: the seed was mistyped or cut short")]
    BadChecksum,
}
