//! Harness shared by the integration tests: processes that are always
//! reaped, also when a test panics.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;

use rustix::process::{kill_process, Pid, Signal};

/// A child process that is killed and reaped when dropped.
pub struct Reaped {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Reaped {
    /// Starts `cmd` with its stdout captured line by line.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        let mut child = cmd.stdout(Stdio::piped()).stdin(Stdio::null()).spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Reaped { child, lines })
    }

    /// Sends a signal to the child.
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, signal);
        }
    }

    /// Kills the child with SIGKILL, waits for it, and returns every line
    /// it printed.
    pub fn kill_and_collect(mut self) -> Vec<String> {
        self.reap();
        self.lines.iter().collect()
    }

    fn reap(&mut self) {
        self.signal(Signal::CONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.reap();
    }
}
