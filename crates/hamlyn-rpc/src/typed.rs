//! Fixed-layout arguments and results: a procedure and its calls without
//! hand-marshalling. Any `zerocopy` type that is `IntoBytes + FromBytes + Immutable +
//! KnownLayout` (a `#[repr(C)]` struct of integers, say) crosses as its bytes.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::server::Procedure;
use crate::{RpcClient, RpcError};

/// A type that crosses a call as its own bytes.
pub trait Wire: IntoBytes + FromBytes + Immutable + KnownLayout + Sized {}
impl<T: IntoBytes + FromBytes + Immutable + KnownLayout + Sized> Wire for T {}

/// A procedure of typed arguments and result; arguments of the wrong size fail the
/// call with a message.
pub fn procedure<A: Wire, R: Wire>(
    mut f: impl FnMut(&A) -> Result<R, String> + Send + 'static,
) -> Procedure {
    Box::new(move |bytes: &[u8], _: &mut crate::server::Ctx<'_>| {
        let args = A::read_from_bytes(bytes).map_err(|_| {
            format!(
                "arguments of {} bytes, expected {}",
                bytes.len(),
                std::mem::size_of::<A>()
            )
        })?;
        f(&args).map(|r| r.as_bytes().to_vec())
    })
}

impl RpcClient {
    /// Calls `name` with typed arguments and result.
    pub fn call_typed<A: Wire, R: Wire>(&mut self, name: &str, args: &A) -> Result<R, RpcError> {
        let bytes = self.call(name, args.as_bytes())?;
        R::read_from_bytes(&bytes).map_err(|_| RpcError::WrongSize {
            what: "result",
            got: bytes.len(),
            want: std::mem::size_of::<R>(),
        })
    }
}
