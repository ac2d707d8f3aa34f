//! EtcdGate: high-water marks kept in etcd, advanced with a txn compare.

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use fencing_core::backend::{check_fixed_source, check_token};
use fencing_core::{Error, FencingToken, Gate, ResourceName, Result, SourceId};

use crate::config::check_prefix;
use crate::conn::Conn;

/// How often a raise is retried when other writers move the mark meanwhile.
const MAX_RACES: usize = 32;

/// A [`Gate`] whose marks live in etcd at `PREFIX/RESOURCE` (decimal text),
/// so every storage node that shares the cluster shares the marks and they
/// survive restarts. A raise is one txn that only applies if the mark did not
/// change since it was read.
///
/// Get one from [`EtcdSource::gate`](crate::EtcdSource::gate). Its marks
/// are bound to that cluster's source id: use the bound form,
/// [`admit_grant`](Gate::admit_grant) (with `grant.info()`) or
/// [`admit_from`](Gate::admit_from), which refuse a token of any other
/// source with [`Error::ForeignSource`]. The unbound
/// [`admit_any_source`](Gate::admit_any_source) takes the
/// token to be this cluster's.
///
/// A cluster restored from a snapshot keeps its cluster id (so the same
/// source id) and rewinds these marks with its data; see the crate docs.
#[derive(Clone)]
pub struct EtcdGate {
    conn: Conn,
    source: SourceId,
    prefix: String,
}

impl EtcdGate {
    pub(crate) fn new(conn: Conn, source: SourceId, prefix: String) -> Result<Self> {
        check_prefix(&prefix)?;
        Ok(EtcdGate {
            conn,
            source,
            prefix,
        })
    }

    fn key(&self, resource: &ResourceName) -> String {
        format!("{}/{}", self.prefix, resource)
    }

    /// The mark and the key's mod revision (0 when absent).
    async fn read(&self, key: &str) -> Result<(Option<FencingToken>, i64)> {
        let resp = self
            .conn
            .call("gate get", |mut c| async move { c.get(key, None).await })
            .await?;
        let Some(kv) = resp.kvs().first() else {
            return Ok((None, 0));
        };
        let text = std::str::from_utf8(kv.value()).unwrap_or("");
        let mark = text
            .parse::<FencingToken>()
            .map_err(|e| Error::backend(format!("etcd gate key {key:?} holds no token"), e))?;
        Ok((Some(mark), kv.mod_revision()))
    }
}

#[async_trait]
impl Gate for EtcdGate {
    /// The marks live in the cluster that mints the tokens, so they are bound
    /// to it: a token named as another source's is refused with
    /// [`Error::ForeignSource`] before anything is read or written; the
    /// unbound form takes the token to be this cluster's.
    async fn admit_with(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        check_fixed_source(resource, &self.source, source)?;
        let key = self.key(resource);
        for _ in 0..MAX_RACES {
            let (mark, mod_rev) = self.read(&key).await?;
            if !check_token(mark, token)? {
                return Ok(());
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    mod_rev,
                )])
                .and_then([TxnOp::put(key.as_str(), token.to_string(), None)]);
            if self
                .conn
                .call("gate txn", |mut c| {
                    let txn = txn.clone();
                    async move { c.txn(txn).await }
                })
                .await?
                .succeeded()
            {
                return Ok(());
            }
        }
        Err(Error::backend(
            "etcd gate",
            format!("mark of {key:?} kept moving for {MAX_RACES} tries"),
        ))
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(self.read(&self.key(resource)).await?.0)
    }
}
