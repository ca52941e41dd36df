//! Newline-delimited reading with a bound: a line longer than the limit is never held in
//! memory whole. We keep its first and last bytes only, so the bridge can still tell which
//! request an oversized reply belonged to and fail that one request instead of letting it hang.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// How many bytes of an oversized line's start and end are kept to find its id.
const KEPT: usize = 4096;

/// What one read produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line (without its newline) within the limit.
    Complete(Vec<u8>),
    /// A line over the limit: its length, and its first and last bytes.
    TooLong {
        len: usize,
        head: Vec<u8>,
        tail: Vec<u8>,
    },
    /// The stream ended (a final line without newline is returned as `Complete` first).
    Eof,
}

/// Reads one line of at most `max` bytes (the newline not counted).
pub async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut len = 0usize;
    let mut tail: Vec<u8> = Vec::new();
    let mut over = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if len == 0 {
                Line::Eof
            } else {
                finish(line, len, tail, over)
            });
        }
        let (part, found) = match chunk.iter().position(|b| *b == b'\n') {
            Some(at) => (&chunk[..at], Some(at)),
            None => (chunk, None),
        };
        len += part.len();
        if !over && len > max {
            over = true;
            line.truncate(KEPT);
        }
        if over {
            if line.len() < KEPT {
                let room = KEPT - line.len();
                line.extend_from_slice(&part[..part.len().min(room)]);
            }
            tail.extend_from_slice(part);
            if tail.len() > KEPT {
                tail.drain(..tail.len() - KEPT);
            }
        } else {
            line.extend_from_slice(part);
        }
        let used = found.map_or(part.len(), |at| at + 1);
        r.consume(used);
        if found.is_some() {
            return Ok(finish(line, len, tail, over));
        }
    }
}

fn finish(line: Vec<u8>, len: usize, tail: Vec<u8>, over: bool) -> Line {
    if over {
        Line::TooLong {
            len,
            head: line,
            tail,
        }
    } else {
        Line::Complete(line)
    }
}

/// The numeric `"id"` of a JSON-RPC message we only have the ends of: the TypeScript SDK
/// writes it last (`…,"jsonrpc":"2.0","id":7}`), most others first (`{"jsonrpc":"2.0","id":7,…`).
/// The bridge's ids towards a child are always numbers, so only numbers are looked for.
pub fn id_in_fragments(head: &[u8], tail: &[u8]) -> Option<u64> {
    last_id(tail).or_else(|| first_id(head))
}

fn id_after(text: &str, at: usize) -> Option<u64> {
    let rest = text[at + 4..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = rest[digits.len()..].trim_start();
    if digits.is_empty() || !(after.starts_with(',') || after.starts_with('}')) {
        return None;
    }
    digits.parse().ok()
}

fn last_id(bytes: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(bytes);
    let at = text.rfind("\"id\"")?;
    // Only an id that closes the message: nested objects' "id" keys are not it.
    let value = id_after(&text, at)?;
    let rest = text[at + 4..].trim_start()[1..].trim_start();
    let after: String = rest.chars().skip_while(char::is_ascii_digit).collect();
    (after.trim() == "}").then_some(value)
}

fn first_id(bytes: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(bytes);
    // Only a top-level key before any nested object opens.
    let at = text.find("\"id\"")?;
    if text[..at].matches('{').count() != 1 {
        return None;
    }
    id_after(&text, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    async fn all_lines(input: &[u8], max: usize, chunk: usize) -> Vec<Line> {
        // A reader that hands out at most `chunk` bytes per fill, like a pipe.
        let reader = tokio_test_reader(input.to_vec(), chunk);
        let mut reader = tokio::io::BufReader::with_capacity(chunk.max(1), reader);
        let mut out = Vec::new();
        loop {
            let line = read_line(&mut reader, max).await.expect("reads");
            if line == Line::Eof {
                return out;
            }
            out.push(line);
        }
    }

    fn tokio_test_reader(data: Vec<u8>, chunk: usize) -> impl tokio::io::AsyncRead + Unpin {
        let chunks: Vec<Vec<u8>> = data.chunks(chunk.max(1)).map(<[u8]>::to_vec).collect();
        let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
        tokio_util_like::StreamReader::new(stream)
    }

    /// A minimal stream-to-reader adapter (no tokio-util dependency for one test).
    mod tokio_util_like {
        use std::pin::Pin;
        use std::task::{Context, Poll};

        use futures::Stream;
        use tokio::io::{AsyncRead, ReadBuf};

        pub struct StreamReader<S> {
            stream: S,
            pending: Vec<u8>,
        }

        impl<S> StreamReader<S> {
            pub fn new(stream: S) -> Self {
                StreamReader {
                    stream,
                    pending: Vec::new(),
                }
            }
        }

        impl<S: Stream<Item = std::io::Result<Vec<u8>>> + Unpin> AsyncRead for StreamReader<S> {
            fn poll_read(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                if self.pending.is_empty() {
                    match Pin::new(&mut self.stream).poll_next(cx) {
                        Poll::Ready(Some(Ok(bytes))) => self.pending = bytes,
                        Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                        Poll::Ready(None) => return Poll::Ready(Ok(())),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.drain(..n);
                Poll::Ready(Ok(()))
            }
        }
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn lines_within_the_limit_come_back_whole() {
        let got = run(all_lines(b"{\"a\":1}\n\n{\"b\":2}", 100, 3));
        assert_eq!(
            got,
            vec![
                Line::Complete(b"{\"a\":1}".to_vec()),
                Line::Complete(Vec::new()),
                Line::Complete(b"{\"b\":2}".to_vec()),
            ]
        );
    }

    #[test]
    fn an_oversized_line_is_cut_and_the_next_one_is_intact() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"result\":{\"x\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'x', 50_000));
        input.extend_from_slice(b"\"},\"id\":42}\n{\"ok\":true}\n");
        let got = run(all_lines(&input, 1000, 8192));
        assert_eq!(got.len(), 2);
        let Line::TooLong { len, head, tail } = &got[0] else {
            panic!("{:?}", got[0]);
        };
        assert_eq!(*len, input.len() - b"{\"ok\":true}\n".len() - 1);
        assert!(head.len() <= KEPT && tail.len() <= KEPT);
        assert_eq!(id_in_fragments(head, tail), Some(42));
        assert_eq!(got[1], Line::Complete(b"{\"ok\":true}".to_vec()));
    }

    #[test]
    fn ids_are_found_at_either_end_and_nested_ids_are_not_taken() {
        assert_eq!(
            id_in_fragments(b"{\"jsonrpc\":\"2.0\",\"id\": 7,", b""),
            Some(7)
        );
        assert_eq!(
            id_in_fragments(b"", b"xx\"}],\"jsonrpc\":\"2.0\",\"id\":9}"),
            Some(9)
        );
        assert_eq!(
            id_in_fragments(b"{\"result\":{\"id\":3,", b"\"id\":4,\"z\":1}}"),
            None
        );
        assert_eq!(id_in_fragments(b"{\"id\":\"s\",", b""), None);
    }

    proptest! {
        #[test]
        fn reading_agrees_with_splitting(
            lines in proptest::collection::vec(proptest::collection::vec(0x20u8..0x7f, 0..40), 0..8),
            max in 1usize..30,
            chunk in 1usize..17,
        ) {
            let mut input = Vec::new();
            for l in &lines { input.extend_from_slice(l); input.push(b'\n'); }
            let got = run(all_lines(&input, max, chunk));
            prop_assert_eq!(got.len(), lines.len());
            for (line, want) in got.iter().zip(&lines) {
                match line {
                    Line::Complete(bytes) => prop_assert!(bytes == want && want.len() <= max),
                    Line::TooLong { len, head, .. } => {
                        prop_assert!(*len == want.len() && want.len() > max);
                        prop_assert!(want.starts_with(head));
                    }
                    Line::Eof => prop_assert!(false),
                }
            }
        }
    }
}
