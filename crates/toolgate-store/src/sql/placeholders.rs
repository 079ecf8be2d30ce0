//! Numbering `?` placeholders `$1`, `$2`, … for PostgreSQL, at compile
//! time ([`numbered!`]).

/// How long `s` is with its `?` placeholders numbered (`numbered!`).
pub(crate) const fn numbered_len(s: &str) -> usize {
    let b = s.as_bytes();
    let (mut i, mut n, mut len) = (0, 0, 0);
    while i < b.len() {
        if b[i] == b'?' {
            n += 1;
            len += 1 + digits(n);
        } else {
            len += 1;
        }
        i += 1;
    }
    len
}

/// `s` with its `?` placeholders numbered `$1`, `$2`, …, as bytes
/// (`numbered!`); `N` is [`numbered_len`] of `s`.
pub(crate) const fn numbered_bytes<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < b.len() {
        if b[i] == b'?' {
            n += 1;
            out[j] = b'$';
            j += 1;
            let d = digits(n);
            let (mut k, mut v) = (d, n);
            while k > 0 {
                k -= 1;
                out[j + k] = b'0' + (v % 10) as u8;
                v /= 10;
            }
            j += d;
        } else {
            out[j] = b[i];
            j += 1;
        }
        i += 1;
    }
    out
}

const fn digits(n: usize) -> usize {
    if n < 10 {
        1
    } else if n < 100 {
        2
    } else {
        3
    }
}

/// A statement written with `?` placeholders as PostgreSQL takes it, with
/// `$1`, `$2`, … in their place: a constant, numbered at compile time. The
/// placeholders bind in the same order either way.
macro_rules! numbered {
    ($sql:expr) => {{
        const LEN: usize = $crate::sql::numbered_len($sql);
        const BYTES: [u8; LEN] = $crate::sql::numbered_bytes::<LEN>($sql);
        match ::core::str::from_utf8(&BYTES) {
            Ok(s) => s,
            Err(_) => panic!("a statement is not UTF-8"),
        }
    }};
}
pub(crate) use numbered;

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_are_numbered_in_order() {
        const SQL: &str = "UPDATE t SET a = ?, b = ? WHERE c IN (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        const N: usize = super::numbered_len(SQL);
        let b = super::numbered_bytes::<N>(SQL);
        assert_eq!(
            std::str::from_utf8(&b).unwrap(),
            "UPDATE t SET a = $1, b = $2 WHERE c IN ($3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        );
    }
}
