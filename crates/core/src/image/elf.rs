//! The platform of this machine and whether a file is an ELF executable for a platform: the
//! checks acceptance and `self-image` make of a binary before they use it (System V ABI,
//! `e_machine` of the ELF header; elf.h `EM_*`).

use crate::config::Platform;

/// The platform of this machine (`linux/amd64`, `linux/arm64`, …).
///
/// Errors: a one-line cause, on an OS or architecture no OCCM image is built for.
pub fn host_platform() -> Result<Platform, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        "arm" => "arm",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS).parse()
}

/// Checks that `data` starts like an ELF executable for `platform`'s architecture.
///
/// Errors: a one-line cause (`not an ELF executable`, `an ELF for AArch64 (arm64), not for linux/amd64`).
pub fn check_elf(data: &[u8], platform: &Platform) -> Result<(), String> {
    if data.len() < 20 || &data[..4] != b"\x7fELF" {
        return Err("not an ELF executable".into());
    }
    let machine = if data[5] == 2 {
        u16::from_be_bytes([data[18], data[19]])
    } else {
        u16::from_le_bytes([data[18], data[19]])
    };
    match elf_machine(&platform.arch) {
        Some(m) if m == machine => Ok(()),
        _ => Err(format!(
            "an ELF for {}, not for {platform}",
            elf_arch_name(machine)
        )),
    }
}

/// The ELF `e_machine` of a Go architecture (System V ABI; elf.h `EM_*`).
fn elf_machine(arch: &str) -> Option<u16> {
    Some(match arch {
        "amd64" => 62,
        "arm64" => 183,
        "arm" => 40,
        "ppc64le" => 21,
        "s390x" => 22,
        "riscv64" => 243,
        _ => return None,
    })
}

fn elf_arch_name(machine: u16) -> String {
    match machine {
        62 => "x86-64 (amd64)".into(),
        183 => "AArch64 (arm64)".into(),
        40 => "ARM".into(),
        21 => "PowerPC64".into(),
        22 => "s390x".into(),
        243 => "RISC-V".into(),
        m => format!("machine {m}"),
    }
}
