/*
 * Device configuration (format in docs/configuration.md). Every error names the spec
 * and the reason through swv_log, because a silently ignored device is much harder to
 * debug than one that refuses to load.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/addr.h"
#include "net/config.h"
#include "util/log.h"

#define SPEC_MAX 512 /* longest accepted spec / config line */

static void dev_defaults(struct swv_dev_config *d)
{
	memset(d, 0, sizeof(*d));
	d->link = SWV_LINK_IB;
	d->max_cntrs = SWV_DEFAULT_MAX_CNTRS;
	d->cntr_max_value = UINT64_MAX;
	d->pkeys[0] = SWV_PKEY_FULL_DEFAULT;
	d->npkeys = 1;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* Strict unsigned decimal: digits only, whole string, within [min, max]. */
static bool parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (v < min || v > max)
		return false;
	*out = v;
	return true;
}

/* "K[:K...]", each K a 16-bit hexadecimal P_Key ("0x" optional) with a non-zero
 * partition number (low 15 bits: 0x0000/0x8000 are the invalid P_Key), no key twice. */
static bool parse_pkeys(char *s, struct swv_dev_config *d)
{
	char *save = NULL;
	unsigned n = 0;

	if (!s || !*s || s[strlen(s) - 1] == ':' || *s == ':' || strstr(s, "::"))
		return false;
	for (char *k = strtok_r(s, ":", &save); k; k = strtok_r(NULL, ":", &save)) {
		k = trim(k);
		if (!strncmp(k, "0x", 2) || !strncmp(k, "0X", 2))
			k += 2;
		size_t len = strlen(k);
		if (len == 0 || len > 4 || strspn(k, "0123456789abcdefABCDEF") != len)
			return false;
		uint16_t key = (uint16_t)strtoul(k, NULL, 16);
		if (!(key & 0x7fff) || n == SWV_MAX_PKEYS)
			return false;
		for (unsigned i = 0; i < n; i++)
			if (d->pkeys[i] == key)
				return false;
		d->pkeys[n++] = key;
	}
	d->npkeys = (uint8_t)n;
	return n > 0;
}

/* Exactly 32 hexadecimal digits ("0x" optional): the 16 bytes of the secret, first
 * byte first. Shorter secrets are refused rather than stretched: the MAC is only as
 * strong as the key. */
static bool parse_auth_key(const char *s, uint8_t out[SWV_AUTH_SECRET_LEN])
{
	if (!s)
		return false;
	if (!strncmp(s, "0x", 2) || !strncmp(s, "0X", 2))
		s += 2;
	if (strlen(s) != 2 * SWV_AUTH_SECRET_LEN ||
	    strspn(s, "0123456789abcdefABCDEF") != strlen(s))
		return false;
	for (unsigned i = 0; i < SWV_AUTH_SECRET_LEN; i++) {
		char byte[3] = {s[2 * i], s[2 * i + 1], '\0'};
		out[i] = (uint8_t)strtoul(byte, NULL, 16);
	}
	return true;
}

/* A key file holds the 32 digits, optionally surrounded by white space and followed by
 * '#' comment lines; nothing else. */
static int read_auth_key_file(const char *path, uint8_t out[SWV_AUTH_SECRET_LEN])
{
	char text[256];
	FILE *f = path && *path ? fopen(path, "re") : NULL;

	if (!f)
		return path && *path ? errno : EINVAL;
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	bool more = !feof(f);
	int err = ferror(f) ? EIO : 0;
	fclose(f);
	if (err)
		return err;
	if (more)
		return EINVAL;
	text[n] = '\0';
	char *hash = strchr(text, '#');
	if (hash)
		*hash = '\0';
	return parse_auth_key(trim(text), out) ? 0 : EINVAL;
}

static bool valid_name(const char *n)
{
	if (!*n)
		return false;
	/* Names end up in ibv_get_device_name and in paths: keep them tame. */
	for (; *n; n++)
		if (!isalnum((unsigned char)*n) && *n != '_' && *n != '-' && *n != '.')
			return false;
	return true;
}

static int bad(const char *spec, const char *why)
{
	/* A secret never goes to the log: the value of auth_key= is blotted out. */
	char shown[SPEC_MAX + 1];
	snprintf(shown, sizeof(shown), "%s", spec);
	for (char *k = strstr(shown, "auth_key="); k; k = strstr(k, "auth_key=")) {
		k += strlen("auth_key=");
		for (; *k && *k != ','; k++)
			*k = '*';
	}
	swv_log(SWV_LOG_ERR, "config: device spec \"%s\": %s", shown, why);
	return EINVAL;
}

int swv_config_parse_spec(const char *spec, struct swv_dev_config *out)
{
	char buf[SPEC_MAX + 1], errbuf[160];
	bool have_link = false, have_mtu = false, have_cntrs = false, have_bits = false;
	bool have_prefix = false, have_pkeys = false, have_auth = false;
	uint64_t v;

	if (!spec || !out)
		return EINVAL;
	if (strlen(spec) > SPEC_MAX)
		return bad("(too long)", "spec longer than 512 characters");
	strcpy(buf, spec);

	struct swv_dev_config d;
	dev_defaults(&d);

	char *save = NULL;
	char *tok = strtok_r(buf, ",", &save);
	char *first = tok ? trim(tok) : NULL;
	char *eq = first ? strchr(first, '=') : NULL;
	if (!eq)
		return bad(spec, "expected name=ipv4[/prefix]");
	*eq = '\0';
	char *name = trim(first), *addr = trim(eq + 1);
	if (!valid_name(name))
		return bad(spec, "device name must be 1..63 characters of [A-Za-z0-9_.-]");
	if (strlen(name) >= sizeof(d.name))
		return bad(spec, "device name longer than 63 characters");
	strcpy(d.name, name);

	char *slash = strchr(addr, '/');
	if (slash) {
		*slash = '\0';
		if (!parse_uint(slash + 1, 1, 32, &v))
			return bad(spec, "prefix length must be 1..32");
		d.prefix_len = (uint8_t)v;
		have_prefix = true;
	}
	if (inet_pton(AF_INET, addr, &d.addr) != 1)
		return bad(spec, "not a dotted-quad IPv4 address");

	/* Options. strtok_r would merge ",," silently, so check for empty tokens by hand. */
	const char *lead = spec;
	while (isspace((unsigned char)*lead))
		lead++;
	if (*lead == ',')
		return bad(spec, "empty option");
	for (const char *p = spec; *p; p++)
		if (*p == ',') {
			const char *q = p + 1;
			while (isspace((unsigned char)*q))
				q++;
			if (*q == ',' || *q == '\0')
				return bad(spec, "empty option");
		}
	while ((tok = strtok_r(NULL, ",", &save))) {
		char *opt = trim(tok), *val = strchr(opt, '=');
		if (val)
			*val++ = '\0', opt = trim(opt), val = trim(val);

		if (!strcmp(opt, "ib") || !strcmp(opt, "roce")) {
			if (val)
				return bad(spec, "ib/roce take no value");
			if (have_link)
				return bad(spec, "link layer given twice");
			have_link = true;
			d.link = opt[0] == 'i' ? SWV_LINK_IB : SWV_LINK_ETH;
		} else if (!strcmp(opt, "mtu")) {
			if (have_mtu)
				return bad(spec, "mtu given twice");
			have_mtu = true;
			if (!val || !parse_uint(val, 256, 4096, &v) || (v & (v - 1)))
				return bad(spec, "mtu must be 256, 512, 1024, 2048 or 4096");
			d.mtu_bytes = (uint32_t)v;
		} else if (!strcmp(opt, "max_cntrs")) {
			if (have_cntrs)
				return bad(spec, "max_cntrs given twice");
			have_cntrs = true;
			/* 0 = a device without completion counters. */
			if (!val || !parse_uint(val, 0, 1u << 20, &v))
				return bad(spec, "max_cntrs must be 0..1048576");
			d.max_cntrs = (uint32_t)v;
		} else if (!strcmp(opt, "cntr_bits")) {
			if (have_bits)
				return bad(spec, "cntr_bits given twice");
			have_bits = true;
			if (!val || !parse_uint(val, 1, 64, &v))
				return bad(spec, "cntr_bits must be 1..64");
			d.cntr_max_value = v == 64 ? UINT64_MAX : (1ull << v) - 1;
		} else if (!strcmp(opt, "pkeys")) {
			if (have_pkeys)
				return bad(spec, "pkeys given twice");
			have_pkeys = true;
			if (!parse_pkeys(val, &d))
				return bad(spec,
					   "pkeys must be 1..16 distinct hexadecimal P_Keys "
					   "K[:K...] with a non-zero partition (low 15 bits)");
		} else if (!strcmp(opt, "auth_key") || !strcmp(opt, "auth_key_file")) {
			if (have_auth)
				return bad(spec, "auth_key/auth_key_file given twice");
			have_auth = true;
			if (opt[8] == '\0') {
				if (!parse_auth_key(val, d.auth_key))
					return bad(
					    spec,
					    "auth_key must be 32 hexadecimal digits (128 bits)");
			} else {
				int err = read_auth_key_file(val, d.auth_key);
				if (err) {
					snprintf(errbuf, sizeof(errbuf), "auth_key_file: %s",
						 err == EINVAL ? "must hold 32 hexadecimal digits "
								 "(128 bits) and nothing else"
							       : strerror(err));
					return bad(spec, errbuf);
				}
			}
			d.auth = true;
		} else {
			snprintf(errbuf, sizeof(errbuf), "unknown option \"%s\"", opt);
			return bad(spec, errbuf);
		}
	}

	/* The device binds its sockets to this address, so it must be ours. */
	uint8_t if_prefix = 0;
	uint32_t ifmtu = 0;
	char ifname[IFNAMSIZ];
	int rc = swv_local_if_of_ip(d.addr, ifname, &if_prefix, &ifmtu);
	if (rc == ENOENT)
		return bad(spec, "address is not assigned to any local interface");
	if (rc) {
		snprintf(errbuf, sizeof(errbuf), "cannot list interfaces: %s", strerror(rc));
		swv_log(SWV_LOG_ERR, "config: device spec \"%s\": %s", spec, errbuf);
		return rc;
	}
	if (!have_prefix)
		d.prefix_len = if_prefix;
	if (!have_mtu)
		d.mtu_bytes = swv_ib_mtu_for_ifmtu(ifmtu);

	if (d.link == SWV_LINK_IB) {
		uint16_t lid = swv_lid_from_ip(&d, d.addr);
		if (lid == 0 || lid == 0xffff) {
			snprintf(errbuf, sizeof(errbuf),
				 "LID (host part of the address in /%u) would be 0x%04x, which "
				 "is reserved; use another address or prefix, or roce",
				 d.prefix_len, lid);
			return bad(spec, errbuf);
		}
	}
	*out = d;
	return 0;
}

/* cfg->source must outlive the load; the configuration is loaded once per process
 * (tests may reload, which rewrites this buffer). */
static pthread_mutex_t source_lock = PTHREAD_MUTEX_INITIALIZER;
static char source_buf[PATH_MAX + 32];

static int add_dev(struct swv_config *cfg, const char *spec)
{
	struct swv_dev_config d;
	int rc = swv_config_parse_spec(spec, &d);

	if (rc)
		return rc;
	for (unsigned i = 0; i < cfg->ndev; i++) {
		if (!strcmp(cfg->dev[i].name, d.name))
			return bad(spec, "duplicate device name");
		if (cfg->dev[i].addr.s_addr == d.addr.s_addr)
			return bad(spec, "address already used by another device");
	}
	if (cfg->ndev >= SWV_MAX_DEVICES)
		return bad(spec, "too many devices (at most 16)");
	cfg->dev[cfg->ndev++] = d;
	return 0;
}

static int load_file(struct swv_config *cfg, const char *path)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned lineno = 0;
	int rc = 0;

	if (!f) {
		rc = errno;
		swv_log(SWV_LOG_ERR, "config: cannot open SWVERBS_CONFIG=%s: %s", path,
			strerror(rc));
		return rc;
	}
	while ((n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (!*s)
			continue;
		if (strlen(s) > SPEC_MAX) {
			swv_log(SWV_LOG_ERR, "config: %s:%u: line too long", path, lineno);
			rc = EINVAL;
			break;
		}
		rc = add_dev(cfg, s);
		if (rc) {
			swv_log(SWV_LOG_ERR, "config: in %s line %u", path, lineno);
			break;
		}
	}
	if (!rc && ferror(f))
		rc = EIO;
	free(line);
	fclose(f);
	return rc;
}

static int load_env_list(struct swv_config *cfg, const char *list)
{
	size_t len = strlen(list);
	char *copy = malloc(len + 1);
	char *save = NULL;
	int rc = 0;

	if (!copy)
		return ENOMEM;
	memcpy(copy, list, len + 1);
	/* Empty items (a trailing ';') are allowed and skipped. */
	for (char *tok = strtok_r(copy, ";\n", &save); tok; tok = strtok_r(NULL, ";\n", &save)) {
		char *s = trim(tok);
		if (!*s)
			continue;
		rc = add_dev(cfg, s);
		if (rc) {
			swv_log(SWV_LOG_ERR, "config: in SWVERBS_DEVICES");
			break;
		}
	}
	free(copy);
	return rc;
}

int swv_config_load(struct swv_config *cfg)
{
	const char *path = getenv("SWVERBS_CONFIG");
	const char *list = getenv("SWVERBS_DEVICES");
	int rc;

	if (!cfg)
		return EINVAL;
	memset(cfg, 0, sizeof(*cfg));
	if (path && !*path)
		path = NULL;
	if (list && !*list)
		list = NULL;

	if (path && (rc = load_file(cfg, path)))
		goto fail;
	if (list && (rc = load_env_list(cfg, list)))
		goto fail;

	if (cfg->ndev == 0) {
		/* The embedded default: loopback, usable by every process on the machine. */
		struct swv_dev_config *d = &cfg->dev[0];
		dev_defaults(d);
		strcpy(d->name, "swv0");
		d->addr.s_addr = htonl(INADDR_LOOPBACK);
		d->prefix_len = 8;
		d->mtu_bytes = 4096;
		cfg->ndev = 1;
		cfg->source = "default";
		return 0;
	}
	if (!path) {
		cfg->source = "SWVERBS_DEVICES";
		return 0;
	}
	pthread_mutex_lock(&source_lock);
	snprintf(source_buf, sizeof(source_buf), "%s%s", path, list ? " + SWVERBS_DEVICES" : "");
	pthread_mutex_unlock(&source_lock);
	cfg->source = source_buf;
	return 0;

fail:
	/* All or nothing: a half-loaded configuration would surprise more than an error. */
	memset(cfg, 0, sizeof(*cfg));
	return rc;
}
