//! A tiny little-endian byte codec for the control protocol: writers append, readers
//! check every length before reading and report [`WireError::Truncated`].

use crate::error::WireError;

/// Appends little-endian fields to a buffer.
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// An empty writer.
    pub fn new() -> Writer {
        Writer(Vec::with_capacity(64))
    }
    /// Appends a u8.
    pub fn u8(&mut self, v: u8) -> &mut Writer {
        self.0.push(v);
        self
    }
    /// Appends a u16.
    pub fn u16(&mut self, v: u16) -> &mut Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u32 length and the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Writer {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
}

/// Reads little-endian fields from a byte slice, never past its end.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(WireError::Truncated {
            need: self.at.saturating_add(n),
            have: self.buf.len(),
        })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    /// Reads a u8.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    /// Reads a u16.
    pub fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    /// Reads a u32.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Reads a u64.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// Reads a u32 length and that many bytes (at most `max`).
    pub fn bytes(&mut self, max: usize) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(WireError::InvalidField {
                field: "length",
                why: "longer than allowed",
            });
        }
        self.take(n)
    }
    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.at == self.buf.len() {
            Ok(())
        } else {
            Err(WireError::LengthMismatch {
                stated: self.at as u64,
                actual: self.buf.len(),
            })
        }
    }
}
