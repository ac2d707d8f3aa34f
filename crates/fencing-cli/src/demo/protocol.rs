//! The two line protocols of the demo.
//!
//! Storage (client -> storage server over the Unix socket), one request per line:
//!
//! ```text
//! HELLO <client>                       -> OK
//! WRITE <resource> <token> <value>     -> OK | REJECTED <presented> <highest> | ERR <message>
//! ```
//!
//! Reports (child stdout -> parent), one event per line:
//!
//! ```text
//! GRANTED <token>
//! WROTE <value> <reply>                (reply as above)
//! PAUSING <value> live=<true|false>    (then the child waits for a line on stdin)
//! RESUMED
//! GIVING-UP
//! RELEASED
//! ERROR <message>
//! ```
//!
//! Names and values are single words, so splitting on spaces is unambiguous.
//! Parsers return an error for anything else and never panic.

use std::fmt;

use fencing::{FencingToken, ResourceName};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// Longest line either side accepts; a peer cannot make us buffer more.
pub const MAX_LINE: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(line: &str, why: &str) -> ProtocolError {
    let shown: String = line.chars().take(80).collect();
    ProtocolError(format!("{why}: {shown:?}"))
}

/// A single word: non-empty, no whitespace or control characters.
pub fn is_word(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn word<'a>(line: &str, field: Option<&'a str>, what: &str) -> Result<&'a str, ProtocolError> {
    match field {
        Some(w) if is_word(w) => Ok(w),
        Some(_) => Err(bad(line, &format!("{what} must be one word"))),
        None => Err(bad(line, &format!("missing {what}"))),
    }
}

fn token(line: &str, field: Option<&str>, what: &str) -> Result<FencingToken, ProtocolError> {
    word(line, field, what)?
        .parse()
        .map_err(|e| bad(line, &format!("bad {what} ({e})")))
}

fn no_more<'a>(line: &str, mut rest: impl Iterator<Item = &'a str>) -> Result<(), ProtocolError> {
    match rest.next() {
        None => Ok(()),
        Some(_) => Err(bad(line, "unexpected extra fields")),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Hello {
        client: String,
    },
    Write {
        resource: ResourceName,
        token: FencingToken,
        value: String,
    },
}

impl Request {
    pub fn parse(line: &str) -> Result<Request, ProtocolError> {
        let mut f = line.split(' ');
        match f.next() {
            Some("HELLO") => {
                let client = word(line, f.next(), "client name")?.to_owned();
                no_more(line, f)?;
                Ok(Request::Hello { client })
            }
            Some("WRITE") => {
                let name = word(line, f.next(), "resource")?;
                let resource = ResourceName::new(name).map_err(|e| bad(line, &e.to_string()))?;
                let token = token(line, f.next(), "token")?;
                let value = word(line, f.next(), "value")?.to_owned();
                no_more(line, f)?;
                Ok(Request::Write {
                    resource,
                    token,
                    value,
                })
            }
            _ => Err(bad(line, "unknown request (expected HELLO or WRITE)")),
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::Hello { client } => write!(f, "HELLO {client}"),
            Request::Write {
                resource,
                token,
                value,
            } => write!(f, "WRITE {resource} {token} {value}"),
        }
    }
}

/// The storage's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ok,
    Rejected {
        presented: FencingToken,
        highest: FencingToken,
    },
    Err(String),
}

impl Reply {
    pub fn parse(line: &str) -> Result<Reply, ProtocolError> {
        let mut f = line.split(' ');
        Reply::from_fields(line, &mut f)
    }

    fn from_fields<'a>(
        line: &str,
        f: &mut impl Iterator<Item = &'a str>,
    ) -> Result<Reply, ProtocolError> {
        match f.next() {
            Some("OK") => no_more(line, f).map(|()| Reply::Ok),
            Some("REJECTED") => {
                let presented = token(line, f.next(), "presented token")?;
                let highest = token(line, f.next(), "highest token")?;
                no_more(line, f)?;
                Ok(Reply::Rejected { presented, highest })
            }
            Some("ERR") => Ok(Reply::Err(f.collect::<Vec<_>>().join(" "))),
            _ => Err(bad(line, "unknown reply (expected OK, REJECTED or ERR)")),
        }
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Ok => f.write_str("OK"),
            Reply::Rejected { presented, highest } => write!(f, "REJECTED {presented} {highest}"),
            // Keep it on one line whatever the message holds.
            Reply::Err(msg) => write!(
                f,
                "ERR {}",
                msg.split_whitespace().collect::<Vec<_>>().join(" ")
            ),
        }
    }
}

/// One event a demo client reports to the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Granted(FencingToken),
    Wrote { value: String, reply: Reply },
    Pausing { value: String, live: bool },
    Resumed,
    GivingUp,
    Released,
    Error(String),
}

impl Report {
    pub fn parse(line: &str) -> Result<Report, ProtocolError> {
        let mut f = line.split(' ');
        let report = match f.next() {
            Some("GRANTED") => Report::Granted(token(line, f.next(), "token")?),
            Some("WROTE") => {
                let value = word(line, f.next(), "value")?.to_owned();
                return Ok(Report::Wrote {
                    value,
                    reply: Reply::from_fields(line, &mut f)?,
                });
            }
            Some("PAUSING") => {
                let value = word(line, f.next(), "value")?.to_owned();
                let live = match f.next() {
                    Some("live=true") => true,
                    Some("live=false") => false,
                    _ => return Err(bad(line, "expected live=true or live=false")),
                };
                Report::Pausing { value, live }
            }
            Some("RESUMED") => Report::Resumed,
            Some("GIVING-UP") => Report::GivingUp,
            Some("RELEASED") => Report::Released,
            Some("ERROR") => return Ok(Report::Error(f.collect::<Vec<_>>().join(" "))),
            _ => return Err(bad(line, "unknown report")),
        };
        no_more(line, f)?;
        Ok(report)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Granted(t) => write!(f, "GRANTED {t}"),
            Report::Wrote { value, reply } => write!(f, "WROTE {value} {reply}"),
            Report::Pausing { value, live } => write!(f, "PAUSING {value} live={live}"),
            Report::Resumed => f.write_str("RESUMED"),
            Report::GivingUp => f.write_str("GIVING-UP"),
            Report::Released => f.write_str("RELEASED"),
            Report::Error(msg) => write!(
                f,
                "ERROR {}",
                msg.split_whitespace().collect::<Vec<_>>().join(" ")
            ),
        }
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes without its line ending;
/// `None` at end of input.
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    let n = reader
        .take(MAX_LINE as u64 + 1)
        .read_line(&mut line)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') && n > MAX_LINE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "line too long",
        ));
    }
    let trimmed = line.strip_suffix('\n').unwrap_or(&line);
    Ok(Some(
        trimmed.strip_suffix('\r').unwrap_or(trimmed).to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: u64) -> FencingToken {
        FencingToken::new(v)
    }

    #[test]
    fn requests_round_trip() {
        let w = Request::Write {
            resource: ResourceName::new("ledger").unwrap(),
            token: t(7),
            value: "100".into(),
        };
        assert_eq!(Request::parse(&w.to_string()).unwrap(), w);
        let h = Request::Hello {
            client: "C1".into(),
        };
        assert_eq!(Request::parse(&h.to_string()).unwrap(), h);
    }

    #[test]
    fn bad_requests_are_errors() {
        for line in [
            "",
            " ",
            "write ledger 1 x",
            "WRITE",
            "WRITE ledger",
            "WRITE ledger 1",
            "WRITE ledger 1 ",
            "WRITE  ledger 1 x",
            "WRITE ledger -1 x",
            "WRITE ledger 01 x",
            "WRITE ledger 99999999999999999999999 x",
            "WRITE ledger one x",
            "WRITE ledger 1 x y",
            "WRITE ledger 1 x\t",
            "HELLO",
            "HELLO a b",
            "DELETE ledger 1",
            "WRITE \u{7f} 1 x",
        ] {
            assert!(Request::parse(line).is_err(), "{line:?} parsed");
        }
    }

    #[test]
    fn replies_round_trip_and_reject_garbage() {
        for r in [
            Reply::Ok,
            Reply::Rejected {
                presented: t(1),
                highest: t(2),
            },
            Reply::Err("gate file: disk full".into()),
        ] {
            assert_eq!(Reply::parse(&r.to_string()).unwrap(), r);
        }
        for line in [
            "",
            "ok",
            "OK now",
            "REJECTED",
            "REJECTED 1",
            "REJECTED 1 x",
            "REJECTED 1 2 3",
            "NOPE",
        ] {
            assert!(Reply::parse(line).is_err(), "{line:?} parsed");
        }
    }

    #[test]
    fn reports_round_trip_and_reject_garbage() {
        for r in [
            Report::Granted(t(3)),
            Report::Wrote {
                value: "1".into(),
                reply: Reply::Rejected {
                    presented: t(3),
                    highest: t(4),
                },
            },
            Report::Wrote {
                value: "0".into(),
                reply: Reply::Ok,
            },
            Report::Pausing {
                value: "1".into(),
                live: true,
            },
            Report::Resumed,
            Report::GivingUp,
            Report::Released,
            Report::Error("cannot connect".into()),
        ] {
            assert_eq!(Report::parse(&r.to_string()).unwrap(), r);
        }
        for line in [
            "",
            "GRANTED",
            "GRANTED x",
            "GRANTED 1 2",
            "WROTE 1",
            "WROTE 1 MAYBE",
            "PAUSING 1",
            "PAUSING 1 live=yes",
            "RELEASED now",
        ] {
            assert!(Report::parse(line).is_err(), "{line:?} parsed");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: every prefix and suffix of some nasty lines.
        let nasty = "WRITE ledger 18446744073709551615 é\u{0}\u{200b} REJECTED 1 2 GRANTED ERR  PAUSING live=true";
        for (i, _) in nasty.char_indices() {
            for s in [&nasty[i..], &nasty[..i]] {
                let _ = Request::parse(s);
                let _ = Reply::parse(s);
                let _ = Report::parse(s);
            }
        }
    }

    #[tokio::test]
    async fn read_line_bounds_length_and_strips_endings() {
        let mut input: &[u8] = b"OK\r\nREJECTED 1 2\nlast";
        assert_eq!(read_line(&mut input).await.unwrap().as_deref(), Some("OK"));
        assert_eq!(
            read_line(&mut input).await.unwrap().as_deref(),
            Some("REJECTED 1 2")
        );
        assert_eq!(
            read_line(&mut input).await.unwrap().as_deref(),
            Some("last")
        );
        assert_eq!(read_line(&mut input).await.unwrap(), None);

        let long = vec![b'x'; MAX_LINE + 10];
        assert!(read_line(&mut &long[..]).await.is_err());
        let mut bad_utf8: &[u8] = b"\xff\xfe\n";
        assert!(read_line(&mut bad_utf8).await.is_err());
    }
}
