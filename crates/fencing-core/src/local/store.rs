//! The on-disk state of a LocalSource directory. Every function here is
//! blocking and runs under the directory's exclusive lock.
//!
//! Layout:
//! - `lock`: held with flock(2) for the duration of every operation, by
//!   every process using the directory;
//! - `identity`: the source id, made once;
//! - `counter`: the last token minted, fsynced before a grant is returned;
//! - `leases/<hash>.lease`: the current holder of one resource.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::durable::{self, Reader};
use crate::error::{Error, Result};
use crate::lease::LossReason;
use crate::resource::ResourceName;
use crate::token::FencingToken;

const COUNTER_MAGIC: &[u8; 8] = b"FNCCNTR1";
const LEASE_MAGIC: &[u8; 8] = b"FNCLEAS1";
const IDENTITY_MAGIC: &[u8; 8] = b"FNCIDNT1";

/// One lease record: who holds a resource, with which token, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaseRecord {
    pub resource: String,
    pub holder: String,
    pub token: FencingToken,
    /// CLOCK_MONOTONIC nanoseconds; meaningful only within `boot_id`.
    pub expires_ns: u64,
    pub boot_id: String,
}

impl LeaseRecord {
    fn is_live(&self, now: &Clock) -> bool {
        self.held_for(now, Duration::ZERO).is_some()
    }

    /// How much longer the record keeps its resource from others: until it
    /// expires plus `delay`; `None` once that passed, or for a record of an
    /// earlier boot.
    fn held_for(&self, now: &Clock, delay: Duration) -> Option<Duration> {
        let until = self.expires_ns.saturating_add(delay.as_nanos() as u64);
        (self.boot_id == now.boot_id && now.ns < until)
            .then(|| Duration::from_nanos(until - now.ns))
    }
}

/// The host's monotonic clock, shared by every process on it, and the boot
/// it belongs to: a record from an earlier boot has expired.
pub(crate) struct Clock {
    ns: u64,
    boot_id: String,
}

impl Clock {
    pub(crate) fn now() -> Clock {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let ns = (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64);
        Clock {
            ns,
            boot_id: boot_id(),
        }
    }
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Outcome of one attempt to take a resource.
pub(crate) enum TryGrant {
    Granted { token: FencingToken, key: PathBuf },
    Held { remaining: Duration },
}

/// An open state directory.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
}

/// The directory lock; released when dropped (or when the process dies).
pub(crate) struct Locked<'a> {
    store: &'a Store,
    _lock: File,
}

impl Store {
    /// Opens the directory, creating it and its identity on first use.
    pub(crate) fn open(dir: &Path) -> Result<(Store, String)> {
        fs::create_dir_all(dir.join("leases")).map_err(|e| Error::io(dir, e))?;
        let store = Store {
            dir: dir.to_path_buf(),
        };
        let identity = store.lock()?.identity()?;
        Ok((store, identity))
    }

    pub(crate) fn lock(&self) -> Result<Locked<'_>> {
        let path = self.dir.join("lock");
        let file = durable::open_lock_file(&path)?;
        file.lock().map_err(|e| Error::io(&path, e))?;
        Ok(Locked {
            store: self,
            _lock: file,
        })
    }

    fn lease_path(&self, resource: &str) -> PathBuf {
        // A fixed-length hash keeps any resource name a safe file name; the
        // record stores the full name to catch a collision.
        let digest = Sha256::digest(resource.as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join("leases").join(format!("{hex}.lease"))
    }
}

impl Locked<'_> {
    fn identity(&self) -> Result<String> {
        let path = self.store.dir.join("identity");
        if let Some(payload) = durable::read_framed(&path, IDENTITY_MAGIC)? {
            return String::from_utf8(payload)
                .map_err(|_| Error::corrupt(&path, "identity is not UTF-8"));
        }
        let id = format!("local:{}", uuid::Uuid::new_v4());
        durable::write_framed(&path, IDENTITY_MAGIC, id.as_bytes())?;
        Ok(id)
    }

    /// The last token minted; zero for a new directory.
    pub(crate) fn last_token(&self) -> Result<FencingToken> {
        let path = self.store.dir.join("counter");
        match durable::read_framed(&path, COUNTER_MAGIC)? {
            None => Ok(FencingToken::ZERO),
            Some(payload) => {
                let mut r = Reader::new(&payload);
                let v = r.u64().and_then(|v| r.finish().map(|()| v));
                v.map(FencingToken::new)
                    .map_err(|reason| Error::corrupt(&path, reason))
            }
        }
    }

    /// Mints the next token. It is on disk (fsynced) before it is returned,
    /// so a crash at any point can never hand it out twice.
    fn mint(&self) -> Result<FencingToken> {
        let next = self.last_token()?.get().checked_add(1).ok_or_else(|| {
            Error::corrupt(self.store.dir.join("counter"), "token counter exhausted")
        })?;
        durable::write_framed(
            &self.store.dir.join("counter"),
            COUNTER_MAGIC,
            &next.to_le_bytes(),
        )?;
        Ok(FencingToken::new(next))
    }

    fn read_lease(&self, resource: &str) -> Result<Option<LeaseRecord>> {
        let path = self.store.lease_path(resource);
        let Some(payload) = durable::read_framed(&path, LEASE_MAGIC)? else {
            return Ok(None);
        };
        let record = decode_lease(&payload).map_err(|reason| Error::corrupt(&path, reason))?;
        if record.resource != resource {
            return Err(Error::corrupt(
                &path,
                "lease file belongs to another resource",
            ));
        }
        Ok(Some(record))
    }

    fn write_lease(&self, record: &LeaseRecord) -> Result<PathBuf> {
        let path = self.store.lease_path(&record.resource);
        durable::write_framed(&path, LEASE_MAGIC, &encode_lease(record))?;
        Ok(path)
    }

    /// The live holder of a resource.
    pub(crate) fn holder(
        &self,
        resource: &ResourceName,
    ) -> Result<Option<(LeaseRecord, Duration)>> {
        let now = Clock::now();
        Ok(self.read_lease(resource.as_str())?.and_then(|r| {
            let remaining = r.held_for(&now, Duration::ZERO)?;
            Some((r, remaining))
        }))
    }

    /// Takes the resource if no live lease holds it and, with a
    /// `lock_delay`, no lease of this boot expired (unreleased) less than
    /// that long ago.
    pub(crate) fn try_grant(
        &self,
        resource: &ResourceName,
        holder: &str,
        ttl: Duration,
        lock_delay: Duration,
    ) -> Result<TryGrant> {
        let now = Clock::now();
        // A released lease is removed, so a record is a live holder or one
        // that ran out, which the lock-delay keeps for that much longer.
        let record = self.read_lease(resource.as_str())?;
        if let Some(remaining) = record.and_then(|r| r.held_for(&now, lock_delay)) {
            return Ok(TryGrant::Held { remaining });
        }
        let token = self.mint()?;
        let key = self.write_lease(&LeaseRecord {
            resource: resource.as_str().to_owned(),
            holder: holder.to_owned(),
            token,
            expires_ns: now.ns.saturating_add(ttl.as_nanos() as u64),
            boot_id: now.boot_id,
        })?;
        Ok(TryGrant::Granted { token, key })
    }

    /// Extends the lease if `token` still holds it. False when it does not.
    pub(crate) fn renew(
        &self,
        resource: &ResourceName,
        token: FencingToken,
        ttl: Duration,
    ) -> Result<Option<LossReason>> {
        let now = Clock::now();
        match self.read_lease(resource.as_str())? {
            Some(mut r) if r.token == token && r.is_live(&now) => {
                r.expires_ns = now.ns.saturating_add(ttl.as_nanos() as u64);
                self.write_lease(&r)?;
                Ok(None)
            }
            Some(r) if r.token == token => Ok(Some(LossReason::SessionExpired)),
            Some(_) => Ok(Some(LossReason::Superseded)),
            None => Ok(Some(LossReason::DeletedAtServer)),
        }
    }

    /// Removes the lease if `token` still holds it.
    pub(crate) fn release(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        match self.read_lease(resource.as_str())? {
            Some(r) if r.token == token => {
                durable::remove(&self.store.lease_path(resource.as_str()))
            }
            _ => Ok(()),
        }
    }

    /// True when `token` holds a live lease on the resource.
    pub(crate) fn is_current(&self, resource: &ResourceName, token: FencingToken) -> Result<bool> {
        Ok(self
            .holder(resource)?
            .is_some_and(|(r, _)| r.token == token))
    }
}

fn encode_lease(r: &LeaseRecord) -> Vec<u8> {
    let mut out = Vec::new();
    durable::put_string(&mut out, &r.resource);
    durable::put_string(&mut out, &r.holder);
    out.extend_from_slice(&r.token.get().to_le_bytes());
    out.extend_from_slice(&r.expires_ns.to_le_bytes());
    durable::put_string(&mut out, &r.boot_id);
    out
}

fn decode_lease(payload: &[u8]) -> std::result::Result<LeaseRecord, String> {
    let mut r = Reader::new(payload);
    let record = LeaseRecord {
        resource: r.string()?,
        holder: r.string()?,
        token: FencingToken::new(r.u64()?),
        expires_ns: r.u64()?,
        boot_id: r.string()?,
    };
    r.finish()?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counter_and_leases_round_trip_and_report_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (store, id) = Store::open(dir.path()).unwrap();
        assert!(id.starts_with("local:"));
        let r = ResourceName::new("res").unwrap();
        let l = store.lock().unwrap();
        let TryGrant::Granted { token, key } = l
            .try_grant(&r, "me", Duration::from_secs(30), Duration::ZERO)
            .unwrap()
        else {
            panic!("free resource not granted")
        };
        assert_eq!(token, FencingToken::new(1));
        assert!(matches!(
            l.try_grant(&r, "you", Duration::from_secs(30), Duration::ZERO)
                .unwrap(),
            TryGrant::Held { .. }
        ));
        assert_eq!(l.renew(&r, token, Duration::from_secs(30)).unwrap(), None);
        assert_eq!(
            l.renew(&r, FencingToken::new(99), Duration::from_secs(30))
                .unwrap(),
            Some(LossReason::Superseded)
        );
        let other = ResourceName::new("never-granted").unwrap();
        assert_eq!(
            l.renew(&other, token, Duration::from_secs(30)).unwrap(),
            Some(LossReason::DeletedAtServer)
        );
        fs::write(&key, b"garbage").unwrap();
        assert!(matches!(l.holder(&r), Err(Error::Corrupt { .. })));
        fs::write(dir.path().join("counter"), b"FNCCNTR1").unwrap();
        assert!(matches!(l.last_token(), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn a_record_from_another_boot_is_expired() {
        let now = Clock {
            ns: 10,
            boot_id: "b".into(),
        };
        let rec = LeaseRecord {
            resource: "r".into(),
            holder: "h".into(),
            token: FencingToken::new(1),
            expires_ns: 1_000,
            boot_id: "a".into(),
        };
        assert!(!rec.is_live(&now));
        assert!(LeaseRecord {
            boot_id: "b".into(),
            ..rec
        }
        .is_live(&now));
    }

    proptest! {
        #[test]
        fn lease_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_lease(&bytes);
        }
    }
}
