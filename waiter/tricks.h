/* Generated from package starttricks (go test ./starttricks -update):
 * the start-latency tricks by name, in the Go list's order. Do not edit. */
#define TRICKS_ENV "POD1_TRICKS_OFF"
#define TRICK_SHED 0
#define TRICK_PRIME 1
#define TRICK_FDTABLE 2
#define TRICK_COMMIT 3
#define TRICK_SPARE 4
#define TRICK_COUNT 5
static const char *const trick_names[TRICK_COUNT] = {
	"shed",
	"prime",
	"fdtable",
	"commit",
	"spare",
};
