//! Sealing and opening a link's records where they lie: the transport phase of Noise
//! (its `CipherState`, Noise specification §5.1) with ring's AEADs, on the two keys the
//! handshake's split produced.
//!
//! snow's own transport seals from one buffer into another and opens the same way, so
//! every byte of a secured stream paid two copies beside its cipher pass: the sender
//! gathered a record's plaintext, snow copied it into the record; the receiver's snow
//! copied the record out and the frame decoder copied the plaintext into the slot. Here
//! the sender gathers plaintext straight into its send queue and seals it there, and
//! the receiver opens a record in the buffer it was read into, where the frame decoder
//! takes the plaintext from: one copy a side fewer.
//!
//! The construction is Noise's, unchanged (a test shows records interoperate with
//! snow's transport both ways): per direction, a 256-bit key and a 64-bit counter `n`
//! from 0; a record is `ENCRYPT(k, n, ad = empty, plaintext)` with a 96-bit nonce of
//! 32 zero bits, then `n` big-endian for AES-GCM or little-endian for ChaChaPoly; the
//! counter never reaches `2^64 - 1`. The initiator (the dialer) seals with the split's
//! first key and opens with its second; the responder the other way round.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

use super::secure::{Cipher, LinkError, TAG_LEN};

/// One direction of a link: its key and the counter of the next record.
pub(crate) struct RecordCipher {
    key: LessSafeKey,
    cipher: Cipher,
    n: u64,
}

impl std::fmt::Debug for RecordCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCipher")
            .field("cipher", &self.cipher)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl RecordCipher {
    /// A direction keyed with `key` (from the handshake's split), its counter at 0.
    pub(crate) fn new(cipher: Cipher, key: &[u8; 32]) -> Result<RecordCipher, LinkError> {
        let algorithm = match cipher {
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        };
        let key = UnboundKey::new(algorithm, key)
            .map_err(|_| LinkError::Noise("the split's key does not fit the cipher".into()))?;
        Ok(RecordCipher {
            key: LessSafeKey::new(key),
            cipher,
            n: 0,
        })
    }

    /// The nonce of record `n`, in the cipher's byte order (Noise §12.3, §12.4).
    fn nonce(&self) -> Result<Nonce, LinkError> {
        if self.n == u64::MAX {
            return Err(LinkError::Exhausted);
        }
        let mut bytes = [0u8; 12];
        bytes[4..].copy_from_slice(&match self.cipher {
            Cipher::Aes256Gcm => self.n.to_be_bytes(),
            Cipher::ChaCha20Poly1305 => self.n.to_le_bytes(),
        });
        Ok(Nonce::assume_unique_for_key(bytes))
    }

    /// Encrypts `plain` where it lies and returns the record's tag (to follow it).
    pub(crate) fn seal_in_place(&mut self, plain: &mut [u8]) -> Result<[u8; TAG_LEN], LinkError> {
        let nonce = self.nonce()?;
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce, Aad::empty(), plain)
            .map_err(|_| LinkError::Noise("sealing failed".into()))?;
        self.n += 1;
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        Ok(out)
    }

    /// Decrypts a record's body (ciphertext and tag) where it lies and returns the
    /// plaintext's length (it starts where the body did). A record that does not
    /// authenticate leaves the counter where it was.
    pub(crate) fn open_in_place(&mut self, body: &mut [u8]) -> Result<usize, LinkError> {
        let nonce = self.nonce()?;
        let n = self
            .key
            .open_in_place(nonce, Aad::empty(), body)
            .map_err(|_| LinkError::BadRecord)?
            .len();
        self.n += 1;
        Ok(n)
    }
}

/// Both directions of a secured link.
#[derive(Debug)]
pub(crate) struct Records {
    /// Seals what this end sends.
    pub(crate) send: RecordCipher,
    /// Opens what the other end sent.
    pub(crate) recv: RecordCipher,
}

impl Records {
    /// The directions of a link whose handshake split into `keys` (`initiator`: this
    /// end dialed).
    pub(crate) fn from_split(
        cipher: Cipher,
        keys: &([u8; 32], [u8; 32]),
        initiator: bool,
    ) -> Result<Records, LinkError> {
        let (send, recv) = if initiator {
            (&keys.0, &keys.1)
        } else {
            (&keys.1, &keys.0)
        };
        Ok(Records {
            send: RecordCipher::new(cipher, send)?,
            recv: RecordCipher::new(cipher, recv)?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A completed `Noise_NN` handshake (no keys needed) in `cipher`: the two ends'
    /// handshake states, ready to split.
    fn handshaken(cipher: Cipher) -> (snow::HandshakeState, snow::HandshakeState) {
        let name = match cipher {
            Cipher::Aes256Gcm => "Noise_NN_25519_AESGCM_BLAKE2s",
            Cipher::ChaCha20Poly1305 => "Noise_NN_25519_ChaChaPoly_BLAKE2s",
        };
        let mut i = snow::Builder::new(name.parse().unwrap())
            .build_initiator()
            .unwrap();
        let mut r = snow::Builder::new(name.parse().unwrap())
            .build_responder()
            .unwrap();
        let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
        let n = i.write_message(&[], &mut a).unwrap();
        r.read_message(&a[..n], &mut b).unwrap();
        let n = r.write_message(&[], &mut a).unwrap();
        i.read_message(&a[..n], &mut b).unwrap();
        (i, r)
    }

    /// Records sealed here open in snow's transport and the reverse, in both ciphers
    /// and both directions, over enough records that the counter's byte order matters.
    #[test]
    fn records_interoperate_with_snows_transport() {
        for cipher in Cipher::ALL {
            let (mut i, mut r) = handshaken(cipher);
            let ours_i = Records::from_split(cipher, &i.dangerously_get_raw_split(), true);
            let ours_r = Records::from_split(cipher, &r.dangerously_get_raw_split(), false);
            let (mut ours_i, mut ours_r) = (ours_i.unwrap(), ours_r.unwrap());
            let mut snow_i = i.into_transport_mode().unwrap();
            let mut snow_r = r.into_transport_mode().unwrap();
            for k in 0..300usize {
                let msg: Vec<u8> = (0..k % 97 + 1).map(|j| (j * 7 + k) as u8).collect();
                // Ours seals (initiator to responder), snow's opens.
                let mut rec = msg.clone();
                let tag = ours_i.send.seal_in_place(&mut rec).unwrap();
                rec.extend_from_slice(&tag);
                let mut out = vec![0u8; rec.len()];
                let n = snow_r.read_message(&rec, &mut out).unwrap();
                assert_eq!(&out[..n], &msg[..], "{cipher} record {k}");
                // snow's seals (responder to initiator), ours opens.
                let n = snow_r.write_message(&msg, &mut out).unwrap();
                let mut rec = out[..n].to_vec();
                let m = ours_i.recv.open_in_place(&mut rec).unwrap();
                assert_eq!(&rec[..m], &msg[..]);
                // And ours to ours the other way, kept in step with snow's counters.
                let mut rec = msg.clone();
                let tag = ours_r.send.seal_in_place(&mut rec).unwrap();
                rec.extend_from_slice(&tag);
                let n = snow_i.read_message(&rec, &mut out).unwrap();
                assert_eq!(&out[..n], &msg[..]);
                let n = snow_i.write_message(&msg, &mut out).unwrap();
                let m = ours_r.recv.open_in_place(&mut out[..n]).unwrap();
                assert_eq!(&out[..m], &msg[..]);
            }
        }
    }

    #[test]
    fn a_record_that_fails_leaves_the_counter_and_the_next_still_opens() {
        let (mut i, mut r) = handshaken(Cipher::Aes256Gcm);
        let mut a =
            Records::from_split(Cipher::Aes256Gcm, &i.dangerously_get_raw_split(), true).unwrap();
        let mut b =
            Records::from_split(Cipher::Aes256Gcm, &r.dangerously_get_raw_split(), false).unwrap();
        let mut rec = b"hello".to_vec();
        let tag = a.send.seal_in_place(&mut rec).unwrap();
        rec.extend_from_slice(&tag);
        let mut bad = rec.clone();
        bad[0] ^= 1;
        assert_eq!(b.recv.open_in_place(&mut bad), Err(LinkError::BadRecord));
        let n = b.recv.open_in_place(&mut rec).unwrap();
        assert_eq!(&rec[..n], b"hello");
        // Opened twice (a replay): the counter moved on, so it fails.
        let mut again = b"hello".to_vec();
        let mut fresh =
            Records::from_split(Cipher::Aes256Gcm, &i.dangerously_get_raw_split(), true).unwrap();
        let tag = fresh.send.seal_in_place(&mut again).unwrap();
        again.extend_from_slice(&tag);
        assert_eq!(b.recv.open_in_place(&mut again), Err(LinkError::BadRecord));
    }

    #[test]
    fn the_last_counter_is_never_used() {
        let (mut i, _) = handshaken(Cipher::Aes256Gcm);
        let mut a =
            Records::from_split(Cipher::Aes256Gcm, &i.dangerously_get_raw_split(), true).unwrap();
        a.send.n = u64::MAX - 1;
        assert!(a.send.seal_in_place(&mut [1, 2, 3]).is_ok());
        assert_eq!(
            a.send.seal_in_place(&mut [1, 2, 3]),
            Err(LinkError::Exhausted)
        );
        a.recv.n = u64::MAX;
        assert_eq!(
            a.recv.open_in_place(&mut [0; 20]),
            Err(LinkError::Exhausted)
        );
    }
}
