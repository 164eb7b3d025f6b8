//! `hamlyn.Ticket` (the capability to write, read or update part of a slot) and seeds,
//! their text form (`str`), which one process hands another.

use hamlyn::{Ticket, TicketFlags};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{self, check};

/// A ticket: a plain value (no connection), valid after its node is closed. `str(ticket)`
/// (or `ticket.seed`) is its seed text ("hmseed1-..."), `Ticket.from_seed(text)` parses
/// one.
#[pyclass(module = "hamlyn._hamlyn", name = "Ticket", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyTicket {
    pub(crate) ticket: Ticket,
}

/// Runs `f` on the bytes of a bytes-like object: `bytes` directly, anything else with
/// the buffer protocol (bytearray, memoryview, numpy arrays) through a copy of a
/// contiguous buffer.
pub(crate) fn with_bytes<T>(
    data: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> PyResult<T>,
) -> PyResult<T> {
    if let Ok(b) = data.downcast::<PyBytes>() {
        return f(b.as_bytes());
    }
    let buf = PyBuffer::<u8>::get(data).map_err(|_| {
        errors::invalid(format!(
            "expected a bytes-like object, not {}",
            data.get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    })?;
    let bytes = buf.to_vec(data.py())?;
    f(&bytes)
}

#[pymethods]
impl PyTicket {
    /// Parses seed text (its first ticket; white space around it is ignored).
    /// `BadSeedError` (a `ValueError`) for text that does not decode: a typo or a cut
    /// string fails the seed's checksum.
    #[staticmethod]
    fn from_seed(text: &str) -> PyResult<PyTicket> {
        match hamlyn::seed::ticket_from_text(text) {
            Ok(ticket) => Ok(PyTicket { ticket }),
            Err(hamlyn::Error::InvalidArgument(why)) => Err(errors::bad_seed(why.to_owned())),
            Err(e) => check(Err(e)),
        }
    }

    /// The seed text of this ticket alone.
    #[getter]
    fn seed(&self) -> PyResult<String> {
        check(hamlyn::seed::ticket_to_text(&self.ticket))
    }

    fn __str__(&self) -> PyResult<String> {
        self.seed()
    }

    fn __repr__(&self) -> String {
        let t = &self.ticket;
        format!(
            "<hamlyn.Ticket node {} slot {} bytes {}..+{} entries {}..+{} {}>",
            t.node.0,
            t.slot.0,
            t.offset,
            t.len,
            t.meta_first,
            t.meta_count,
            self.grants()
        )
    }

    /// Splits the ticket among `parts` delegates (group receive): the byte range in even
    /// contiguous parts (the remainder to the last), the share likewise, so that the
    /// receiver's entry completes once every part has been sent. `SplitError` if it
    /// cannot be split that many ways.
    fn split(&self, parts: usize) -> PyResult<Vec<PyTicket>> {
        let split = check(self.ticket.split(parts).map_err(hamlyn::Error::Split))?;
        Ok(split
            .into_iter()
            .map(|ticket| PyTicket { ticket })
            .collect())
    }

    /// The node of the slot.
    #[getter]
    fn node(&self) -> u32 {
        self.ticket.node.0
    }

    /// The slot.
    #[getter]
    fn slot(&self) -> u32 {
        self.ticket.slot.0
    }

    /// Start of the byte range, slot-relative.
    #[getter]
    fn offset(&self) -> u64 {
        self.ticket.offset
    }

    /// Bytes in the range.
    #[getter]
    fn length(&self) -> u64 {
        self.ticket.len
    }

    /// First metadata entry granted.
    #[getter]
    fn meta_first(&self) -> u32 {
        self.ticket.meta_first
    }

    /// Metadata entries granted.
    #[getter]
    fn meta_count(&self) -> u32 {
        self.ticket.meta_count
    }

    /// What it grants, as letters: 'w' writes, 'r' reads, 'a' atomics, 'f' a fast slot.
    #[getter]
    fn grants(&self) -> String {
        [
            (TicketFlags::WRITE, 'w'),
            (TicketFlags::READ, 'r'),
            (TicketFlags::ATOMIC, 'a'),
            (TicketFlags::FAST, 'f'),
        ]
        .iter()
        .filter(|(f, _)| self.ticket.flags.contains(*f))
        .map(|(_, c)| *c)
        .collect()
    }
}

/// The seed text carrying `tickets` (1 to 16), for one process to hand another.
#[pyfunction]
pub(crate) fn seed_from_tickets(tickets: Vec<PyTicket>) -> PyResult<String> {
    let seed = hamlyn::Seed {
        protocol: 0,
        tickets: tickets.iter().map(|t| t.ticket).collect(),
        data: Vec::new(),
    };
    check(hamlyn::seed::to_text(&seed))
}

/// A seed from its text (white space around it ignored). `BadSeedError` for text that
/// does not decode.
pub(crate) fn seed_from_text(text: &str) -> PyResult<hamlyn::Seed> {
    match hamlyn::seed::from_text(text.trim()) {
        Ok(seed) => Ok(seed),
        Err(hamlyn::Error::InvalidArgument(why)) => Err(errors::bad_seed(why.to_owned())),
        Err(e) => check(Err(e)),
    }
}

/// A seed's text.
pub(crate) fn seed_to_text(seed: &hamlyn::Seed) -> PyResult<String> {
    check(hamlyn::seed::to_text(seed))
}

/// Every ticket of a seed's text. `BadSeedError` for text that does not decode.
#[pyfunction]
pub(crate) fn tickets_from_seed(text: &str) -> PyResult<Vec<PyTicket>> {
    let seed = check(hamlyn::seed::from_text(text))?;
    Ok(seed
        .tickets
        .into_iter()
        .map(|ticket| PyTicket { ticket })
        .collect())
}
