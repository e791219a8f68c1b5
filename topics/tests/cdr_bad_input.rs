//! `MaxSize` on sizes a `usize` cannot hold (IDL such as `double m[4294967295][4294967295]`):
//! it saturates at `usize::MAX`, never overflows.

use spindle_topics::cdr::MaxSize;
use spindle_topics::ENCAPSULATION_HEADER_LEN;

#[test]
fn max_size_saturates_past_usize_max() {
    let huge = 4_294_967_295usize * 4_294_967_295;
    let s = MaxSize::start().primitive_array(8, huge);
    assert_eq!(s.size(), usize::MAX);
    assert_eq!(s.encoded(), usize::MAX);
    // Saturation carries through later members, unions and optionals.
    assert_eq!(s.primitive(4).string(3).size(), usize::MAX);
    assert_eq!(MaxSize::start().either(s).size(), usize::MAX);
    assert_eq!(MaxSize::start().optional(s.size()).size(), usize::MAX);
    assert_eq!(MaxSize::start().string(usize::MAX).size(), usize::MAX);
    assert_eq!(
        MaxSize::start().primitive_sequence(8, usize::MAX).size(),
        usize::MAX
    );
    assert_eq!(
        MaxSize::start()
            .primitive(1)
            .primitive_array(2, usize::MAX / 2)
            .size(),
        usize::MAX
    );
    // Just below the limit is still exact.
    let n = (usize::MAX - 8) / 8;
    assert_eq!(MaxSize::start().primitive_array(8, n).size(), n * 8);
    assert_eq!(
        MaxSize::start().primitive(8).encoded(),
        8 + ENCAPSULATION_HEADER_LEN
    );
}

/// In `const` context too (generated code computes `MAX_SERIALIZED_SIZE` there).
#[test]
fn max_size_saturates_in_const_context() {
    const HUGE: usize = MaxSize::start().primitive_array(8, usize::MAX).encoded();
    assert_eq!(HUGE, usize::MAX);
}
