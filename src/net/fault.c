/*
 * Seeded fault injector. Decisions come from a private splitmix64 stream so a run is
 * reproducible from its seed, independent of rand() users in the application.
 * Applying a decision (holding, flipping bits) is endpoint.c's job.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "net/fault.h"
#include "util/log.h"

#define FAULT_SPEC_MAX 256

struct swv_fault {
	pthread_mutex_t lock; /* RNG state and stats: endpoints may share an injector */
	uint64_t state;
	/* Probabilities as thresholds on a 53-bit uniform draw: 2^53 means "always". */
	uint64_t p_drop, p_dup, p_reorder, p_corrupt, p_delay;
	uint64_t delay_ns, reorder_ns;
	struct swv_fault_stats stats;
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* true with the probability encoded in thr (always consumes one draw, so the stream
 * position does not depend on earlier outcomes). */
static bool draw(uint64_t *s, uint64_t thr)
{
	return (splitmix64(s) >> 11) < thr;
}

static bool parse_percent(const char *v, uint64_t *thr)
{
	char *end;
	double p;

	if (!*v || isspace((unsigned char)*v))
		return false;
	errno = 0;
	p = strtod(v, &end);
	if (errno || *end || !isfinite(p) || p < 0.0 || p > 100.0)
		return false;
	*thr = (uint64_t)(p / 100.0 * 9007199254740992.0); /* 2^53 */
	return true;
}

static bool parse_u64(const char *v, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (*v < '0' || *v > '9')
		return false; /* no sign, no space, not empty */
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x > max)
		return false;
	*out = x;
	return true;
}

static int bad_spec(const char *spec, const char *why, const char *key)
{
	swv_log(SWV_LOG_ERR, "SWVERBS_FAULT \"%s\": %s%s%s", spec, why, key ? " " : "",
		key ? key : "");
	return EINVAL;
}

static int parse(const char *spec, struct swv_fault *f)
{
	char buf[FAULT_SPEC_MAX + 1];
	char *save = NULL, *tok;
	unsigned seen = 0;
	uint64_t delay_us = 200, reorder_us = 1000;
	static const char *const keys[] = {"seed",    "drop",  "dup",      "reorder",
					   "corrupt", "delay", "delay_us", "reorder_us"};

	if (strlen(spec) > FAULT_SPEC_MAX)
		return bad_spec("(too long)", "longer than 256 characters", NULL);
	strcpy(buf, spec);
	f->state = 1;
	for (const char *p = spec; *p; p++)
		if (*p == ',' && (p == spec || p[1] == ',' || p[1] == '\0'))
			return bad_spec(spec, "empty item", NULL);

	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *val = strchr(tok, '=');
		unsigned k;

		if (!val)
			return bad_spec(spec, "expected key=value, got", tok);
		*val++ = '\0';
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			if (!strcmp(tok, keys[k]))
				break;
		if (k == sizeof(keys) / sizeof(keys[0]))
			return bad_spec(spec, "unknown key", tok);
		if (seen & (1u << k))
			return bad_spec(spec, "key given twice:", tok);
		seen |= 1u << k;

		bool ok;
		switch (k) {
		case 0: ok = parse_u64(val, UINT64_MAX, &f->state); break;
		case 1: ok = parse_percent(val, &f->p_drop); break;
		case 2: ok = parse_percent(val, &f->p_dup); break;
		case 3: ok = parse_percent(val, &f->p_reorder); break;
		case 4: ok = parse_percent(val, &f->p_corrupt); break;
		case 5: ok = parse_percent(val, &f->p_delay); break;
		case 6: ok = parse_u64(val, 10000000, &delay_us); break; /* <= 10 s */
		default: ok = parse_u64(val, 10000000, &reorder_us); break;
		}
		if (!ok)
			return bad_spec(spec, k == 0 || k >= 6 ? "bad integer for"
							       : "bad percentage (0..100) for",
					keys[k]);
	}
	f->delay_ns = delay_us * 1000;
	f->reorder_ns = reorder_us * 1000;
	return 0;
}

struct swv_fault *swv_fault_create(const char *spec)
{
	struct swv_fault *f;
	int rc;

	if (!spec) {
		errno = EINVAL;
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		errno = ENOMEM;
		return NULL;
	}
	rc = parse(spec, f);
	if (rc) {
		free(f);
		errno = rc;
		return NULL;
	}
	pthread_mutex_init(&f->lock, NULL);
	swv_log(SWV_LOG_WARN, "fault injection on: %s", spec);
	return f;
}

int swv_fault_from_env(struct swv_fault **out)
{
	const char *spec = getenv("SWVERBS_FAULT");

	if (!out)
		return EINVAL;
	*out = NULL;
	if (!spec || !*spec)
		return 0;
	*out = swv_fault_create(spec);
	return *out ? 0 : errno;
}

struct swv_fault *swv_fault_create_from_env(void)
{
	struct swv_fault *f;
	int rc = swv_fault_from_env(&f);

	errno = rc;
	return f;
}

void swv_fault_destroy(struct swv_fault *f)
{
	if (!f)
		return;
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void swv_fault_decide(struct swv_fault *f, struct swv_fault_decision *d)
{
	if (!d)
		return;
	d->what = 0;
	d->bit_rand = 0;
	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	/* Always six draws per packet, in a fixed order. */
	bool drop = draw(&f->state, f->p_drop);
	bool corrupt = draw(&f->state, f->p_corrupt);
	bool dup = draw(&f->state, f->p_dup);
	bool delay = draw(&f->state, f->p_delay);
	bool reorder = draw(&f->state, f->p_reorder);
	d->bit_rand = splitmix64(&f->state);

	f->stats.packets++;
	if (drop) {
		d->what = SWV_FAULT_DROP;
		f->stats.dropped++;
	} else {
		d->what = (corrupt ? SWV_FAULT_CORRUPT : 0) | (dup ? SWV_FAULT_DUP : 0) |
			  (delay ? SWV_FAULT_DELAY : reorder ? SWV_FAULT_REORDER : 0);
		f->stats.corrupted += corrupt;
		f->stats.duplicated += dup;
		f->stats.delayed += delay;
		f->stats.reordered += !delay && reorder;
	}
	pthread_mutex_unlock(&f->lock);
}

uint64_t swv_fault_delay_ns(const struct swv_fault *f)
{
	return f ? f->delay_ns : 0;
}

uint64_t swv_fault_reorder_timeout_ns(const struct swv_fault *f)
{
	return f ? f->reorder_ns : 0;
}

void swv_fault_get_stats(struct swv_fault *f, struct swv_fault_stats *st)
{
	if (!st)
		return;
	memset(st, 0, sizeof(*st));
	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	*st = f->stats;
	pthread_mutex_unlock(&f->lock);
}
