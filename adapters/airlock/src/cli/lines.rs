//! The lines of a buffered reader, each handed out where it lies: a line inside the reader's
//! buffer is read in place, and only a line that crosses a refill is copied (`policy eval
//! --jsonl` decides hundreds of megabytes of actions; copying each line once more was a few
//! percent of its time).
//!
//! The lines are `read_until(b'\n')`'s: a newline ends a line, so empty input has no lines, "\n"
//! has one blank line, and a last line without a newline is still a line. The newline is not
//! part of the line.

use std::io::{self, BufRead};

/// Why the walk over the lines stopped early.
#[derive(Debug)]
pub enum LinesStopped {
    /// The input could not be read (after the lines already handed out).
    Read(io::Error),
    /// The caller's handler failed (its output could not be written).
    Handler(io::Error),
}

/// Calls `each` with every line of `input`, in order.
pub fn for_each_line(
    input: &mut dyn BufRead,
    mut each: impl FnMut(&[u8]) -> io::Result<()>,
) -> Result<(), LinesStopped> {
    let mut carried: Vec<u8> = Vec::new();
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(LinesStopped::Read(error)),
        };
        if available.is_empty() {
            if !carried.is_empty() {
                each(&carried).map_err(LinesStopped::Handler)?;
            }
            return Ok(());
        }
        match memchr::memchr(b'\n', available) {
            Some(end) => {
                if carried.is_empty() {
                    each(&available[..end]).map_err(LinesStopped::Handler)?;
                } else {
                    carried.extend_from_slice(&available[..end]);
                    each(&carried).map_err(LinesStopped::Handler)?;
                    carried.clear();
                }
                input.consume(end + 1);
            }
            None => {
                carried.extend_from_slice(available);
                let taken = available.len();
                input.consume(taken);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], capacity: usize) -> Vec<Vec<u8>> {
        let mut reader = io::BufReader::with_capacity(capacity, input);
        let mut out = Vec::new();
        for_each_line(&mut reader, |line| {
            out.push(line.to_vec());
            Ok(())
        })
        .expect("a slice reads");
        out
    }

    /// `read_until`'s lines, without their newlines: the reference.
    fn reference(input: &[u8]) -> Vec<Vec<u8>> {
        let mut reader = io::BufReader::new(input);
        let mut out = Vec::new();
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => return out,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    out.push(line);
                }
                Err(error) => panic!("a slice reads: {error}"),
            }
        }
    }

    #[test]
    fn lines_are_read_until_s_at_every_buffer_size() {
        let inputs: [&[u8]; 8] = [
            b"",
            b"\n",
            b"\n\n",
            b"one",
            b"one\n",
            b"one\ntwo",
            b"a longer first line\n\nthird\r\nlast without newline",
            b"{\"x\":1}\n{\"y\":\"\xc3\xa9\"}\n",
        ];
        for input in inputs {
            for capacity in [1, 2, 3, 5, 8, 64] {
                assert_eq!(
                    lines(input, capacity),
                    reference(input),
                    "{:?} at capacity {capacity}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn a_failing_handler_stops_the_walk() {
        let mut reader = io::BufReader::new(&b"a\nb\nc\n"[..]);
        let mut seen = 0;
        let stopped = for_each_line(&mut reader, |_| {
            seen += 1;
            if seen == 2 {
                Err(io::Error::other("stdout closed"))
            } else {
                Ok(())
            }
        });
        assert!(matches!(stopped, Err(LinesStopped::Handler(_))));
        assert_eq!(seen, 2);
    }
}
