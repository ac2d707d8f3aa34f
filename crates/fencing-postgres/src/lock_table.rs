//! The SQL of [`PgSource`](crate::PgSource): one table of locks, a sequence
//! of tokens, and a one-row table naming the source.
//!
//! Every statement judges expiry on the server's clock
//! (`clock_timestamp()`), never the client's: clients' clocks may jump, the
//! database's is the one every contender reads.

use crate::ident::Ident;
use fencing_core::Result;

/// The bits of a token below the timeline. The token is
/// `timeline << 40 | nextval`: a standby promoted after the primary lost
/// WAL that had advanced the sequence starts a new timeline, so its tokens
/// are higher than any the lost primary minted (ZooKeeper's zxid puts its
/// epoch in its high bits the same way).
pub(crate) const SEQUENCE_BITS: u32 = 40;

/// The current timeline of the primary, from the name of its WAL segment
/// (its first 8 hex digits): readable by any role, unlike
/// `pg_control_checkpoint()`.
const TIMELINE: &str =
    "(('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint)";

/// The statements of one lock table, built once from its checked name.
#[derive(Clone, Debug)]
pub(crate) struct LockTable {
    pub(crate) table: Ident,
    pub(crate) channel: String,
    pub(crate) schema: String,
    pub(crate) source_id: String,
    pub(crate) acquire: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) row: String,
    pub(crate) current: String,
    pub(crate) guard: String,
    pub(crate) release_all: String,
}

impl LockTable {
    pub(crate) fn new(table: &str) -> Result<LockTable> {
        let ident = Ident::new(table)?;
        // The derived names must fit PostgreSQL's 63 bytes too.
        let seq = Ident::new(&format!("{table}_tokens"))?.sql();
        let source = Ident::new(&format!("{table}_source"))?.sql();
        let t = ident.sql();
        let ms = "* interval '1 millisecond'";
        Ok(LockTable {
            channel: table.to_owned(),
            schema: format!(
                "CREATE SEQUENCE IF NOT EXISTS {seq} MAXVALUE {max};\n\
                 CREATE TABLE IF NOT EXISTS {t} (\n    \
                     name TEXT PRIMARY KEY,\n    \
                     holder TEXT NOT NULL,\n    \
                     token BIGINT NOT NULL,\n    \
                     expires_at TIMESTAMPTZ NOT NULL\n);\n\
                 CREATE TABLE IF NOT EXISTS {source} (\n    \
                     one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),\n    \
                     id TEXT NOT NULL\n);\n\
                 INSERT INTO {source} (id) VALUES (gen_random_uuid()::text) ON CONFLICT DO NOTHING;",
                max = (1u64 << SEQUENCE_BITS) - 1,
            ),
            source_id: format!("SELECT id FROM {source}"),
            // One statement: the token is drawn, and the lock taken only
            // where it has run out (plus the lock-delay) on the server's
            // clock. A refused acquire returns no row; its token is a gap.
            acquire: format!(
                "INSERT INTO {t} AS l (name, holder, token, expires_at) \
                 SELECT $1, $2, ({TIMELINE} << {SEQUENCE_BITS}) | nextval('{seq}'), clock_timestamp() + $3::bigint {ms} \
                 ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at \
                 WHERE l.expires_at + $4::bigint {ms} <= clock_timestamp() \
                 RETURNING token"
            ),
            // A lease that ran out is not renewed back to life, even when
            // no one took it: its holder's deadline has passed too.
            // One statement for the grants of one TTL ($1 names, $2 tokens).
            renew: format!(
                "UPDATE {t} AS l SET expires_at = clock_timestamp() + $3::bigint {ms} \
                 FROM unnest($1::text[], $2::bigint[]) AS u(name, token) \
                 WHERE l.name = u.name AND l.token = u.token AND l.expires_at > clock_timestamp() \
                 RETURNING l.name, l.token"
            ),
            release: format!(
                "WITH gone AS (DELETE FROM {t} WHERE name = $1 AND token = $2 RETURNING name) \
                 SELECT pg_notify($3, name) FROM gone"
            ),
            release_all: format!(
                "WITH gone AS (DELETE FROM {t} WHERE (name, token) IN \
                 (SELECT * FROM unnest($1::text[], $2::bigint[])) RETURNING name) \
                 SELECT pg_notify($3, name) FROM gone"
            ),
            // The row as it stands, live or not, and how long until it
            // may be taken: its lease left, plus the lock-delay $2.
            row: format!(
                "SELECT holder, token, GREATEST(0, (extract(epoch FROM \
                 expires_at + $2::bigint {ms} - clock_timestamp()) * 1000)::bigint) \
                 FROM {t} WHERE name = $1"
            ),
            current: format!(
                "SELECT 1 FROM {t} WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            // FOR SHARE: an acquire's upsert of this row waits until the
            // caller's transaction ends, so the lease cannot change hands
            // between this check and the caller's commit.
            guard: format!(
                "SELECT token FROM {t} WHERE name = $1 AND expires_at > clock_timestamp() FOR SHARE"
            ),
            table: ident,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_with_their_derived_names() {
        assert!(LockTable::new("fencing_locks").is_ok());
        assert!(LockTable::new("bad-name").is_err());
        // 63 bytes is fine for the table, not once `_tokens` is added.
        assert!(LockTable::new(&"x".repeat(60)).is_err());
        assert!(LockTable::new(&"x".repeat(56)).is_ok());
    }

    #[test]
    fn the_schema_names_every_object() {
        let t = LockTable::new("locks").unwrap();
        for object in ["\"locks_tokens\"", "\"locks\"", "\"locks_source\""] {
            assert!(t.schema.contains(object), "{object} in {}", t.schema);
        }
    }
}
