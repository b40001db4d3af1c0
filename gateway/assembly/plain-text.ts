// Whether a request body's long string literal is plain text: every byte printable ASCII or
// DEL (0x20 to 0x7F) and none a backslash, so its bytes are its UTF-8 text and JSON reads
// them as they are (gateway/src/requests/long-literals.ts). Sixty-four bytes a step: per
// sixteen, a vector add and two compares, or-ed into masks tested once at the end.
//
// Layout: the caller copies the literal to `scratch()` and pads it with spaces to a multiple
// of sixty-four bytes, growing the memory first when it is too small.

/** Where the caller puts the bytes: past this module's own data, 16-byte aligned. */
export function scratch(): usize {
  return (__heap_base + 15) & ~(<usize>15);
}

/** 1 when the `length` bytes at `scratch()` (a multiple of 64) are plain text, else 0. */
export function plainText(length: usize): i32 {
  const at = scratch();
  // A byte plus 0x60 (wrapping) lands below -32 as a signed byte exactly when it was 0x20 to 0x7F.
  const shift = i8x16.splat(0x60);
  const most = i8x16.splat(-33);
  const backslash = i8x16.splat(0x5c);
  let bad0 = i8x16.splat(0);
  let bad1 = i8x16.splat(0);
  for (let p = at; p < at + length; p += 64) {
    const a = v128.load(p);
    const b = v128.load(p, 16);
    const c = v128.load(p, 32);
    const d = v128.load(p, 48);
    bad0 = v128.or(bad0, v128.or(i8x16.gt_s(i8x16.add(a, shift), most), i8x16.eq(a, backslash)));
    bad1 = v128.or(bad1, v128.or(i8x16.gt_s(i8x16.add(b, shift), most), i8x16.eq(b, backslash)));
    bad0 = v128.or(bad0, v128.or(i8x16.gt_s(i8x16.add(c, shift), most), i8x16.eq(c, backslash)));
    bad1 = v128.or(bad1, v128.or(i8x16.gt_s(i8x16.add(d, shift), most), i8x16.eq(d, backslash)));
  }
  return v128.any_true(v128.or(bad0, bad1)) ? 0 : 1;
}
