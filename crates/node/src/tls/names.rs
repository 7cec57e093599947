//! The names in a certificate that was already verified: its subject's
//! common name and its DNS subjectAltNames. A minimal DER walk (webpki
//! checks names but does not list them); anything unexpected gives `None`.

/// What [`cert_names`] finds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertNames {
    pub common_name: Option<String>,
    pub dns: Vec<String>,
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const VERSION: u8 = 0xa0;
const EXTENSIONS: u8 = 0xa3;
/// GeneralName's `dNSName [2] IA5String`.
const DNS_NAME: u8 = 0x82;
/// 2.5.4.3 (commonName) and 2.5.29.17 (subjectAltName), DER-encoded.
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

/// One DER element: its tag, its contents, and what follows it.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (bytes, rest) = rest.split_at_checked(n)?;
        let len = (bytes.iter()).fold(0usize, |a, &b| (a << 8) | usize::from(b));
        (len, rest)
    };
    let (content, rest) = rest.split_at_checked(len)?;
    Some((tag, content, rest))
}

/// The elements of a constructed element's contents.
fn elements(mut input: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (tag, content, rest) = tlv(input)?;
        input = rest;
        Some((tag, content))
    })
}

/// The names of a DER certificate.
pub fn cert_names(der: &[u8]) -> Option<CertNames> {
    let (SEQUENCE, cert, _) = tlv(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = tlv(cert)? else {
        return None;
    };
    let mut fields = elements(tbs).peekable();
    if fields.peek()?.0 == VERSION {
        fields.next();
    }
    // serialNumber, signature, issuer, validity, then subject.
    let (tag, subject) = fields.nth(4)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut names = CertNames {
        common_name: common_name(subject),
        dns: Vec::new(),
    };
    for (tag, content) in fields {
        if tag == EXTENSIONS {
            let (SEQUENCE, exts, _) = tlv(content)? else {
                return None;
            };
            names.dns = dns_names(exts).unwrap_or_default();
        }
    }
    Some(names)
}

fn common_name(subject: &[u8]) -> Option<String> {
    for (tag, rdn) in elements(subject) {
        if tag != SET {
            continue;
        }
        for (_, atv) in elements(rdn) {
            let mut parts = elements(atv);
            let (OID, oid) = parts.next()? else { continue };
            if oid == CN_OID {
                let (_, value) = parts.next()?;
                return String::from_utf8(value.to_vec()).ok();
            }
        }
    }
    None
}

fn dns_names(exts: &[u8]) -> Option<Vec<String>> {
    for (_, ext) in elements(exts) {
        let mut parts = elements(ext);
        let (OID, oid) = parts.next()? else { continue };
        if oid != SAN_OID {
            continue;
        }
        // An optional `critical` BOOLEAN, then the OCTET STRING.
        let value = parts.find(|(t, _)| *t == OCTET_STRING)?.1;
        let (SEQUENCE, general_names, _) = tlv(value)? else {
            return None;
        };
        let dns = elements(general_names)
            .filter(|(t, _)| *t == DNS_NAME)
            .filter_map(|(_, n)| String::from_utf8(n.to_vec()).ok())
            .collect();
        return Some(dns);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_or_garbage_input_is_none_not_a_panic() {
        assert_eq!(cert_names(&[]), None);
        assert_eq!(cert_names(&[0x30, 0x85, 1, 2, 3, 4, 5]), None);
        assert_eq!(cert_names(&[0x30, 0x03, 0x30, 0x01]), None);
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            let _ = cert_names(&junk);
        }
    }
}
