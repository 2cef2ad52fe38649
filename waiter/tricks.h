/* Generated from package starttricks (go test ./starttricks -update):
 * the start-latency tricks by name, in the Go list's order. Do not edit. */
#define TRICKS_ENV "POD1_TRICKS_OFF"
#define TRICK_SPARE 0
#define TRICK_SHED 1
#define TRICK_PRIME 2
#define TRICK_EARLY_MOVES 3
#define TRICK_HOLD_NS 4
#define TRICK_FDTABLE 5
#define TRICK_COMMIT 6
#define TRICK_COUNT 7
static const char *const trick_names[TRICK_COUNT] = {
	"spare",
	"shed",
	"prime",
	"early-moves",
	"hold-ns",
	"fdtable",
	"commit",
};
