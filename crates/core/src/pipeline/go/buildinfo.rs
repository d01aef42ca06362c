//! A Go binary's embedded build information, read from the file itself as Go's
//! `debug/buildinfo` reads it, without starting a Go process.
//!
//! The ELF section `.go.buildinfo` begins with a 32-byte header: the magic `"\xff Go buildinf:"`
//! (14 bytes), the pointer size, a flags byte and padding. With flag `0x2` (every Go since 1.18)
//! the Go version and the module information follow the header as strings, each prefixed by
//! its length as an unsigned varint. The module information is the text of
//! `runtime/debug.BuildInfo.String()` (`path`, `mod`, `dep`, `=>` and `build` lines) between two
//! 16-byte sentinels. Sources: Go `src/debug/buildinfo/buildinfo.go` (`readRawBuildInfo`,
//! `decodeString`), `src/runtime/debug/mod.go` (`ParseBuildInfo`).

use object::{Object, ObjectSection};

const MAGIC: &[u8] = b"\xff Go buildinf:";
const FLAG_INLINE: u8 = 0x2;

/// Reads the build information of the ELF binary at `path`, reading only its headers and the
/// `.go.buildinfo` section (a few KiB of a 70 MB binary).
///
/// Errors: as [`read`], and a file that cannot be opened.
pub fn read_file(path: &std::path::Path) -> Result<BuildInfo, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let cache = object::ReadCache::new(file);
    read(&cache)
}

/// Reads the build information of the ELF binary `bytes` (a byte slice, or a
/// [`object::ReadCache`] over a file).
///
/// Errors (in a few words, for a fallback to `go version -m`): not ELF, no `.go.buildinfo`
/// section, an older pre-1.18 layout, or malformed strings.
pub fn read<'d, R: object::ReadRef<'d>>(bytes: R) -> Result<BuildInfo, String> {
    let file = object::File::parse(bytes).map_err(|e| format!("not a binary: {e}"))?;
    let section = file
        .section_by_name(".go.buildinfo")
        .ok_or("no .go.buildinfo section")?;
    let data = section.data().map_err(|e| e.to_string())?;
    let header = data.get(..32).ok_or("short .go.buildinfo")?;
    if !header.starts_with(MAGIC) {
        return Err("no build info magic".into());
    }
    if header[15] & FLAG_INLINE == 0 {
        return Err("build info from a Go before 1.18".into());
    }
    let (version, rest) = string(&data[32..]).ok_or("malformed Go version")?;
    let (modinfo, _) = string(rest).ok_or("malformed module information")?;
    // Strip the sentinels (debug/buildinfo: `mod[16:len(mod)-16]` when `mod[len-17] == '\n'`).
    let modinfo = if modinfo.len() >= 33 && modinfo[modinfo.len() - 17] == b'\n' {
        &modinfo[16..modinfo.len() - 16]
    } else {
        modinfo
    };
    let version = String::from_utf8_lossy(version);
    let text = format!("binary: {version}\n{}", String::from_utf8_lossy(modinfo));
    parse_version_m(&text).ok_or_else(|| "no module information".into())
}

/// A uvarint-length-prefixed string and what follows it.
fn string(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut len: u64 = 0;
    let mut shift = 0;
    for (i, &b) in data.iter().enumerate().take(10) {
        len |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            let start = i + 1;
            let end = start.checked_add(usize::try_from(len).ok()?)?;
            return Some((data.get(start..end)?, &data[end..]));
        }
        shift += 7;
    }
    None
}

/// One module from a binary's embedded build information.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Module {
    /// Module path, e.g. `k8s.io/client-go`.
    pub path: String,
    /// Version, e.g. `v0.34.1`; `(devel)` for the main module.
    #[serde(default)]
    pub version: String,
    /// go.sum hash (`h1:` + base64 sha256 of the module tree), when known.
    #[serde(default)]
    pub sum: String,
    /// The replacement, when the module is replaced.
    #[serde(default)]
    pub replace: Option<Box<Module>>,
}

/// The build information Go embeds in a binary (`go version -m -json`; `runtime/debug.BuildInfo`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BuildInfo {
    /// Toolchain that built it, e.g. `go1.25.1`.
    pub go_version: String,
    /// Main package path.
    pub path: String,
    /// Main module.
    pub main: Module,
    /// Dependency modules linked in.
    #[serde(default)]
    pub deps: Vec<Module>,
}

/// Parses `go version -m` output: `<file>: go1.25.1`, then tab-indented `path`, `mod`, `dep` and
/// `=>` (the replacement of the `dep` above) lines, tab-separated (`runtime/debug.BuildInfo.String`,
/// the same format from Go 1.18 on). Other lines (`build` settings) are ignored.
pub fn parse_version_m(text: &str) -> Option<BuildInfo> {
    let mut lines = text.lines();
    let go_version = lines.next()?.rsplit_once(": ")?.1.trim().to_string();
    let module = |f: &[&str]| Module {
        path: f.get(1).copied().unwrap_or_default().to_string(),
        version: f.get(2).copied().unwrap_or_default().to_string(),
        sum: f.get(3).copied().unwrap_or_default().to_string(),
        replace: None,
    };
    let mut path = None;
    let mut main = None;
    let mut deps: Vec<Module> = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.trim_start_matches('\t').split('\t').collect();
        match f[0] {
            "path" => path = f.get(1).map(|p| p.to_string()),
            "mod" => main = Some(module(&f)),
            "dep" => deps.push(module(&f)),
            "=>" => {
                if let Some(d) = deps.last_mut() {
                    d.replace = Some(Box::new(module(&f)));
                }
            }
            _ => {}
        }
    }
    Some(BuildInfo {
        go_version,
        path: path?,
        main: main?,
        deps,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_uvarint_strings() {
        let mut data = vec![3u8];
        data.extend_from_slice(b"abcX");
        let (s, rest) = super::string(&data).unwrap();
        assert_eq!((s, rest), (&b"abc"[..], &b"X"[..]));
        let mut long = vec![0x81, 0x01];
        long.extend(std::iter::repeat_n(b'x', 129));
        assert_eq!(super::string(&long).unwrap().0.len(), 129);
        assert!(super::string(&[5, b'a']).is_none());
        assert!(super::read(&b"not elf"[..]).is_err());
    }
}
