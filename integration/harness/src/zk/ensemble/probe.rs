//! Asking a server directly: four-letter words over TCP, and a session
//! through that server alone.

use super::*;

/// Sends the four-letter word `word` (e.g. `"srvr"`, `"ruok"`) to the
/// server at `addr` (`127.0.0.1:PORT`) and returns its whole answer. The
/// connect, the send and reading until the server closes together take at
/// most `timeout`; running out is [`ZkHarnessError::Timeout`].
pub async fn four_letter_word(
    addr: &str,
    word: &str,
    timeout: Duration,
) -> Result<String, ZkHarnessError> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(answer)) => Ok(String::from_utf8_lossy(&answer).into_owned()),
        Ok(Err(e)) => Err(ZkHarnessError::io(format!("`{word}` to {addr}"), e)),
        Err(_) => Err(ZkHarnessError::Timeout(format!(
            "`{word}` to {addr}: no answer within {timeout:?}"
        ))),
    }
}

/// Opens a ZooKeeper session through the server at `addr` alone (with
/// zookeeper-client; SASL DIGEST-MD5 as `sasl` when given) and returns its
/// id; dropping the client then closes the session from its background
/// task. Creating a session is a quorum transaction, so success proves that
/// this server is connected to a working leader (or is a working
/// standalone server) — which `srvr` alone does not: a follower that was
/// stopped past `syncLimit` still says `Mode: follower` for a moment after
/// it continues, before it notices that the leader dropped it. Takes at most
/// `timeout`.
pub async fn session_roundtrip(
    addr: &str,
    sasl: Option<(&str, &str)>,
    timeout: Duration,
) -> Result<i64, ZkHarnessError> {
    let mut connector = zookeeper_client::Client::connector()
        .with_session_timeout(HEALTH_SESSION_TIMEOUT)
        .with_connection_timeout(timeout)
        .with_fail_eagerly();
    if let Some((user, password)) = sasl {
        connector = connector.with_sasl(zookeeper_client::SaslOptions::digest_md5(
            user.to_owned(),
            password.to_owned(),
        ));
    }
    match tokio::time::timeout(timeout, connector.connect(addr)).await {
        Ok(Ok(client)) => Ok(client.session_id().0),
        Ok(Err(e)) => Err(ZkHarnessError::Unhealthy(format!(
            "no session through {addr}: {e}"
        ))),
        Err(_) => Err(ZkHarnessError::Timeout(format!(
            "no session through {addr} within {timeout:?}"
        ))),
    }
}
