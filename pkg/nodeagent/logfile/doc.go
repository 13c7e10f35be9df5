// Package logfile stores and reads container logs.
//
// Each container attempt has one log file. Every line written by the
// container is stored as
//
//	<RFC3339Nano timestamp> <stream> <F|P> <content>
//
// (the CRI log format: F marks a full line, P a partial one that the
// container ended without a newline), so the reader can answer the kubelet
// log options: timestamps, tailLines, sinceTime/sinceSeconds, limitBytes and
// follow. When the file grows past the size limit it is renamed to
// "<file>.1" (replacing an older one) and a new file is started, so at most
// two files per attempt stay on disk.
package logfile
