//! `NumPy` `.npz` archives (a zip of `.npy` arrays), loadable with `numpy.load`.

use std::io::{Seek, Write};

use zip::{CompressionMethod, ZipWriter, write::SimpleFileOptions};

/// One array to store in an archive.
pub enum NpyArray<'a> {
    /// float32 values with a shape.
    F32 { shape: Vec<usize>, data: &'a [f32] },
    /// int64 values with a shape.
    I64 { shape: Vec<usize>, data: Vec<i64> },
    /// A 1-D array of unicode strings (`<U{width}`).
    Str(&'a [String]),
}

/// Writes named arrays as an uncompressed `.npz` archive.
pub fn write_npz<W: Write + Seek>(out: W, arrays: &[(&str, NpyArray<'_>)]) -> std::io::Result<W> {
    let mut zip = ZipWriter::new(out);
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored).large_file(true);
    for (name, array) in arrays {
        zip.start_file(format!("{name}.npy"), options).map_err(std::io::Error::other)?;
        write_npy(&mut zip, array)?;
    }
    zip.finish().map_err(std::io::Error::other)
}

/// Writes one array in `.npy` format version 1.0.
fn write_npy(w: &mut impl Write, array: &NpyArray<'_>) -> std::io::Result<()> {
    let (descr, shape) = match array {
        NpyArray::F32 { shape, .. } => ("<f4".to_string(), shape.clone()),
        NpyArray::I64 { shape, .. } => ("<i8".to_string(), shape.clone()),
        NpyArray::Str(items) => {
            let width = items.iter().map(|s| s.chars().count()).max().unwrap_or(0).max(1);
            (format!("<U{width}"), vec![items.len()])
        }
    };
    let shape_text = match shape.as_slice() {
        [one] => format!("({one},)"),
        dims => format!("({})", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Magic (6) + version (2) + length (2) + header, padded with spaces and a newline to 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    let len = u16::try_from(header.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    match array {
        NpyArray::F32 { data, .. } => {
            for v in *data {
                w.write_all(&v.to_le_bytes())?;
            }
        }
        NpyArray::I64 { data, .. } => {
            for v in data {
                w.write_all(&v.to_le_bytes())?;
            }
        }
        NpyArray::Str(items) => {
            let width = descr[2..].parse::<usize>().unwrap_or(1);
            for s in *items {
                let mut n = 0;
                for c in s.chars() {
                    w.write_all(&(c as u32).to_le_bytes())?;
                    n += 1;
                }
                for _ in n..width {
                    w.write_all(&0u32.to_le_bytes())?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_headers_are_aligned_and_describe_the_array() {
        let mut buf = Vec::new();
        write_npy(&mut buf, &NpyArray::F32 { shape: vec![1, 2], data: &[1.0, 2.0] }).unwrap();
        let header_len = u16::from_le_bytes([buf[8], buf[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&buf[10..10 + header_len]).unwrap();
        assert!(header.contains("'descr': '<f4'") && header.contains("'shape': (1, 2)"));
        assert_eq!(&buf[10 + header_len..], &[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
    }

    #[test]
    fn strings_are_fixed_width_utf32() {
        let mut buf = Vec::new();
        let items = vec!["é".to_string(), "ab".to_string()];
        write_npy(&mut buf, &NpyArray::Str(&items)).unwrap();
        let header_len = u16::from_le_bytes([buf[8], buf[9]]) as usize;
        let header = std::str::from_utf8(&buf[10..10 + header_len]).unwrap();
        assert!(header.contains("'<U2'") && header.contains("(2,)"));
        assert_eq!(buf.len() - 10 - header_len, 2 * 2 * 4);
    }
}
