// HTTP/1.1's field grammar (RFC 9110 §5.1, §5.5) as the client checks it,
// both for what it writes and for what an upstream answers.

/** A token: a method or a field name. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** A field value's bytes (latin1): visible characters, spaces and tabs, obs-text; no CR, LF or other controls. */
export const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
