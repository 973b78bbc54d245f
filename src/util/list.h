/* Intrusive doubly linked list. Callers provide the locking. */
#ifndef SWV_UTIL_LIST_H
#define SWV_UTIL_LIST_H

#include <stdbool.h>
#include "util/compiler.h"

struct swv_list {
	struct swv_list *next, *prev;
};

static inline void swv_list_init(struct swv_list *l)
{
	l->next = l->prev = l;
}

static inline bool swv_list_empty(const struct swv_list *l)
{
	return l->next == l;
}

static inline void swv_list_add_tail(struct swv_list *head, struct swv_list *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static inline void swv_list_del(struct swv_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

#define swv_list_entry(ptr, type, member) swv_container_of(ptr, type, member)
#define swv_list_for_each(pos, head)      for (pos = (head)->next; pos != (head); pos = pos->next)
#define swv_list_for_each_safe(pos, tmp, head)                                                     \
	for (pos = (head)->next, tmp = pos->next; pos != (head); pos = tmp, tmp = pos->next)

#endif
